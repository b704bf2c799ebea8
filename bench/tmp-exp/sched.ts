import { readFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { chatBody } from '../lib/load.js';
import { startPlatform, startUpstream, startFloor } from '../lib/procs.js';
const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;
const mode = (process.argv[2] ?? 'embedded') as 'embedded' | 'production';
const upstream = await startUpstream();
const platform = await startPlatform(mode);
await platform.addProviders(upstream, [20]);
const sched = async (pid: number) => (await readFile(`/proc/${pid}/task/${pid}/schedstat`, 'utf8')).trim().split(' ').map(Number);
const pin = (pid: number, cpus: string) => execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
const quant = async () => {
  const text = await (await fetch(`${platform.llmUrl}/metrics`)).text();
  return [...text.matchAll(/^nodejs_eventloop_delay_seconds\{[^}]*quantile="([^"]+)"[^}]*\} (\S+)$/gm)].map((m) => `${m[1]}:${(Number(m[2]) * 1000).toFixed(1)}`).join(' ');
};
const run = async (label: string, stream = false) => {
  await quant();
  const a = await sched(platform.pid);
  const t = performance.now();
  const r = await autocannon({ url: `${platform.edgeUrl}/v1/chat/completions`, method: 'POST', connections: 64, duration: 5, headers: { 'content-type': 'application/json', 'x-api-key': platform.adminKey }, body: chatBody('bench-d20', stream) });
  const s = (performance.now() - t) / 1000;
  const b = await sched(platform.pid);
  console.log(`${label} ${stream ? 'stream' : 'json'}: ${r.requests.average} req/s, main cpu ${((b[0]-a[0])/1e6/s).toFixed(0)} ms/s (${((b[0]-a[0])/1e6/r.requests.total).toFixed(3)} ms/req), rq wait ${((b[1]-a[1])/1e6/s).toFixed(0)} ms/s, loop ${await quant()}`);
};
try {
  await run('warmup'); await run('warmup', true);
  for (let i = 0; i < 3; i++) {
    for (const stream of [false, true]) {
      pin(platform.pid, '0,1'); pin(process.pid, '0,1'); pin(upstream.pid, '0,1');
      await run('shared', stream);
      pin(platform.pid, '1'); pin(process.pid, '0'); pin(upstream.pid, '0');
      await run('own core', stream);
    }
  }
} finally {
  await platform.stop(); await upstream.stop();
  process.exit(0);
}
