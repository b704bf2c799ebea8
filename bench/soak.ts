/**
 * `npm run bench:soak`: a steady load (non-stream and stream, 20 ms upstream) on every path at once
 * for a while, sampling each process's RSS; prints each process's RSS slope after warm-up, in MiB
 * per minute (least squares). A leak shows as a slope that does not flatten. Beside it, each
 * process's resident WebAssembly memory at the end and the slope of the rest of its RSS: the
 * embedded database runs PostgreSQL in a WebAssembly memory that never shrinks, so whatever it
 * once needed (its buffer pool from the start, the largest ANALYZE sample so far) stays resident.
 *
 *   --minutes M    load duration (default 10)
 *   --warmup W     minutes excluded from the slope (default 3, at most half the duration): in the first two
 *                  minutes each Node process's RSS peaks and then drops once by 15-40 MiB (seen at 1.5-2.1 min
 *                  in every production process alike); a warm-up that ends in that trough reads the refill as
 *                  a slope (one 10-minute run: a copy under PLATFORM_PROCESSES read 1.06 MiB/min after 2 min,
 *                  0.65 after 3 from the same samples)
 *   --rate R       requests/s per path and kind (default 50: 50 non-stream + 50 stream per path)
 *   --modes a,b    embedded, production (default both); --no-peer skips the peer
 *   --processes N  also the production drivers with PLATFORM_PROCESSES=N ("production-xN", default 2;
 *                  1 leaves it out): its RSS is its copies' summed, each copy's listed beside it, so a
 *                  leak in one copy shows even where the supervisor, which serves nothing, stays flat
 *   --env "K=v,…"  settings for our platform (an ablation: two soaks side by side with different values)
 *   --dist DIR     the build to run (default dist; a copy made before a change, for a before/after pair)
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { chatBody, platformTarget, steadyLoad, type Target } from './lib/load.js';
import { parseEnvPairs, rssMiB, severalProcesses, sumOverProcesses, wasmResidentMiB, startPlatform, startPortkey, startUpstream, type Peer, type Platform, type PlatformMode, type Proc } from './lib/procs.js';
import { fmt, renderTable, verdict, type Row } from './lib/report.js';

const { values: args } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    warmup: { type: 'string' },
    rate: { type: 'string', default: '50' },
    modes: { type: 'string', default: 'embedded,production' },
    'no-peer': { type: 'boolean', default: false },
    processes: { type: 'string', default: '2' },
    env: { type: 'string', default: '' },
    dist: { type: 'string', default: 'dist' },
  },
});
const minutes = Number(args.minutes);
const warmup = Math.min(Number(args.warmup ?? 3), minutes / 2);
const rate = Number(args.rate);
const modes = args.modes!.split(',').filter(Boolean) as PlatformMode[];
const platformEnv = parseEnvPairs(args.env!);
const multi = severalProcesses(args.processes);

/** Least-squares slope of (minutes, MiB) points. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  const num = points.reduce((s, p) => s + (p[0] - mx) * (p[1] - my), 0);
  const den = points.reduce((s, p) => s + (p[0] - mx) ** 2, 0);
  return num / den;
}

const procs: Proc[] = [];
const stopAll = () => Promise.all(procs.splice(0).map((p) => p.stop().catch(() => {})));
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void stopAll().finally(() => process.exit(130)));

async function main() {
  console.log(`# soak — ${minutes} min (slope after ${warmup} min), ${rate} + ${rate} stream req/s per path; Node ${process.version}, ${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  const upstream = await startUpstream();
  procs.push(upstream);
  const entry = `${args.dist}/services/platform/main.js`;
  const settled = await Promise.allSettled<Proc>([
    ...modes.map((m) => startPlatform(m, platformEnv, m, entry)),
    ...(multi ? [startPlatform('production', { ...platformEnv, ...multi.env }, multi.name, entry)] : []),
    ...(args['no-peer'] ? [] : [startPortkey()]),
  ]);
  for (const s of settled) if (s.status === 'fulfilled') procs.push(s.value);
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  const targets: Target[] = [];
  for (const p of procs) {
    if ('mode' in p) {
      const platform = p as Platform;
      await platform.addProviders(upstream, [20]);
      targets.push(platformTarget(platform, platform.name));
    } else if (p.name === 'portkey') {
      const peer = p as Peer;
      targets.push({
        name: 'portkey',
        chat: (d, stream) => ({ url: `${peer.url}/v1/chat/completions`, headers: { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstream.base(d), authorization: 'Bearer sk-bench' }, body: chatBody(`bench-d${d}`, stream) }),
      });
    }
  }

  /**
   * What is sampled: each process, except that a platform run as several copies (its supervisor
   * serves nothing) is sampled as its copies summed and as each copy alone, so a leak in one copy
   * shows where the sum would dilute it.
   */
  const series = procs.flatMap((p) => {
    const serving = 'serving' in p ? (p as Platform).serving : [p.pid];
    const whole = { name: p.name, pids: serving };
    return serving.length === 1 ? [whole] : [whole, ...serving.map((pid, i) => ({ name: `${p.name} copy ${i + 1}`, pids: [pid] }))];
  });
  const samples = new Map<string, Array<[number, number]>>(series.map((s) => [s.name, []]));
  // The same samples less the process's WebAssembly memory (the embedded database's PostgreSQL):
  // that memory has a fixed size during a run, and its pages become resident as the database's
  // buffer pool is first used, so its part of the slope flattens at that size, unlike a leak.
  const outsideWasm = new Map<string, Array<[number, number]>>(series.map((s) => [s.name, []]));
  const wasmAtEnd = new Map<string, number>();
  const t0 = Date.now();
  let sampling = true;
  const sampler = (async () => {
    let next = 0;
    while (sampling) {
      const at = (Date.now() - t0) / 60_000;
      for (const s of series) {
        const rss = await rssMiB(s.pids);
        const wasm = await sumOverProcesses(s.pids, wasmResidentMiB);
        samples.get(s.name)!.push([at, rss]);
        outsideWasm.get(s.name)!.push([at, rss - wasm]);
        if (Number.isFinite(wasm)) wasmAtEnd.set(s.name, wasm);
      }
      if (at >= next) {
        console.log(`${at.toFixed(1)} min: ${procs.map((p) => `${p.name} ${fmt(samples.get(p.name)!.at(-1)![1], 0)} MiB`).join(', ')}`);
        next += 1;
      }
      await sleep(5000);
    }
  })();
  const seconds = Math.round(minutes * 60);
  const loads = await Promise.all(
    targets.flatMap((t) => [false, true].map((stream) => steadyLoad(t, { rate, connections: 8, seconds, delayMs: 20, stream }).then((r) => ({ name: t.name, stream, ...r })))),
  );
  sampling = false;
  await sampler;

  const rows: Row[] = series.map(({ name }) => {
    const after = (points: Array<[number, number]>) => points.filter(([at, mib]) => at >= warmup && Number.isFinite(mib));
    const points = after(samples.get(name)!);
    const s = slope(points);
    return {
      metric: name,
      cells: {
        'RSS after warm-up MiB': fmt(points[0]?.[1] ?? Number.NaN, 0),
        'RSS at end MiB': fmt(points.at(-1)?.[1] ?? Number.NaN, 0),
        'slope MiB/min': fmt(s, 3),
        'WebAssembly at end MiB': fmt(wasmAtEnd.get(name) ?? Number.NaN, 0),
        'slope outside it MiB/min': fmt(slope(after(outsideWasm.get(name)!)), 3),
      },
      target: name === 'upstream' ? '' : '<= 1 MiB/min',
      verdict: name === 'upstream' ? undefined : verdict(s <= 1),
    };
  });
  console.log(`\n## RSS slope after ${warmup} min warm-up`);
  console.log(renderTable(['RSS after warm-up MiB', 'RSS at end MiB', 'slope MiB/min', 'WebAssembly at end MiB', 'slope outside it MiB/min'], rows));
  for (const l of loads) console.log(`${l.name} ${l.stream ? 'stream' : 'non-stream'}: ${l.requests} requests, ${l.errors} errors`);
  const file = join('bench', 'results', `${new Date().toISOString().replace(/[:.]/g, '-')}-soak.json`);
  await mkdir(join('bench', 'results'), { recursive: true });
  await writeFile(file, `${JSON.stringify({ date: new Date().toISOString(), node: process.version, loadavg: loadavg(), minutes, warmup, rate, rows, loads, samples: Object.fromEntries(samples), outsideWasm: Object.fromEntries(outsideWasm) }, null, 2)}\n`);
  console.log(`figures written to ${file}`);
}

try {
  await main();
} finally {
  await stopAll();
}
