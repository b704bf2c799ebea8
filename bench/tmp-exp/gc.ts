import { readFile } from 'node:fs/promises';
import { platformTarget, throughput } from '../lib/load.js';
import { startPlatform, startUpstream } from '../lib/procs.js';
process.env.BENCH_PLATFORM_NODE_ARGS = `--trace-gc-nvp`;
const stream = process.argv[2] === 'stream';
const upstream = await startUpstream();
const platform = await startPlatform((process.argv[3] ?? 'embedded') as any);
await platform.addProviders(upstream, [20]);
const target = platformTarget(platform);
await throughput(target, { connections: 64, seconds: 3, delayMs: 20, stream });
const all0 = await readFile(platform.logFile, 'utf8');
const run = await throughput(target, { connections: 64, seconds: 8, delayMs: 20, stream });
const all = await readFile(platform.logFile, 'utf8');
await platform.stop(); await upstream.stop();
const first = new RegExp(`\\[${platform.pid}:(0x[0-9a-f]+)\\]`).exec(all)?.[1];
console.log('rps', run.rps.toFixed(0), 'first isolate in the whole log', first);
const log = all.slice(all0.length);
const by = new Map<string, Map<string, number[]>>();
for (const line of log.split('\n')) {
  const iso = /\[\d+:(0x[0-9a-f]+)\]/.exec(line)?.[1]; const gc = / gc=(\w+) /.exec(line)?.[1]; if (!iso || !gc) continue;
  const p = Number(/ pause=([0-9.]+)/.exec(line)?.[1] ?? 0);
  const m = by.get(iso) ?? new Map(); by.set(iso, m); m.set(gc, [...(m.get(gc) ?? []), p]);
}
for (const [iso, m] of by) console.log(iso, [...m].map(([g, ps]) => `${g}: n=${ps.length} sum=${ps.reduce((a, b) => a + b, 0).toFixed(0)}ms max=${Math.max(...ps).toFixed(1)} p50=${ps.sort((a,b)=>a-b)[Math.floor(ps.length/2)]!.toFixed(1)}`).join('; '));
process.exit(0);
