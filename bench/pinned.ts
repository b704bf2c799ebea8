/**
 * `node --import tsx bench/pinned.ts` (after `npm run build`): is the platform's event-loop delay
 * under load its own, or the other processes'? On this bench's machine the load generator and the
 * fake provider share the platform's cores. Each round drives the platform at 64 connections twice:
 * with every process free to use every core, and with the platform pinned to a core of its own
 * (`taskset`; this harness, which runs the load generator, and the fake provider on the others).
 * It prints, per window, req/s, the main thread's CPU and its wait on the run queue (from
 * /proc/<pid>/task/<pid>/schedstat), and the platform's own event-loop delay quantiles.
 *   --mode embedded|production (production: no PGlite worker to share the pinned core)
 *   --rounds N (3)  --seconds S (5)
 * Needs two cores or more, and `taskset` (util-linux).
 */
import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { eventLoopQuantiles, platformTarget, throughput } from './lib/load.js';
import { startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: { mode: { type: 'string', default: 'production' }, rounds: { type: 'string', default: '3' }, seconds: { type: 'string', default: '5' } },
});
const cores = cpus().length;
if (cores < 2) throw new Error('bench/pinned.ts needs two cores or more');
const all = `0-${cores - 1}`;
const own = String(cores - 1);
const others = cores === 2 ? '0' : `0-${cores - 2}`;

/** CPU time and run-queue wait of the main thread, ns (Linux schedstat). */
async function schedstat(pid: number): Promise<{ cpu: number; wait: number }> {
  const [cpu, wait] = (await readFile(`/proc/${pid}/task/${pid}/schedstat`, 'utf8')).trim().split(' ').map(Number);
  return { cpu: cpu!, wait: wait! };
}

/** Every thread of the process, so the platform's helpers (GC, the PGlite worker) go where it goes. */
const pin = (pid: number, list: string) => execFileSync('taskset', ['--all-tasks', '--pid', '--cpu-list', list, String(pid)], { stdio: 'ignore' });

const upstream = await startUpstream();
const platform = await startPlatform(args.mode as PlatformMode);
const metrics = `${platform.llmUrl}/metrics`;
const target = platformTarget(platform);
const seconds = Number(args.seconds);

const loopQuantiles = async () =>
  Object.entries(await eventLoopQuantiles(metrics))
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([q, ms]) => `${q === '1' ? 'max' : `p${Number(q) * 100}`} ${ms.toFixed(1)}`)
    .join(', ');

async function window(label: string, stream: boolean): Promise<void> {
  await eventLoopQuantiles(metrics); // resets the window
  const before = await schedstat(platform.pid);
  const started = performance.now();
  const { rps } = await throughput(target, { connections: 64, seconds, delayMs: 20, stream });
  const elapsed = (performance.now() - started) / 1000;
  const after = await schedstat(platform.pid);
  const busy = (after.cpu - before.cpu) / 1e9 / elapsed;
  const waiting = (after.wait - before.wait) / 1e9 / elapsed;
  console.log(
    `${label.padEnd(9)} ${stream ? 'stream    ' : 'non-stream'} ${String(Math.round(rps)).padStart(5)} req/s, main thread busy ${(busy * 100).toFixed(0)} %, ` +
      `waiting to run ${(waiting * 100).toFixed(0)} %, ${((after.cpu - before.cpu) / 1e6 / (rps * seconds)).toFixed(3)} ms CPU/request; event loop ${await loopQuantiles()} ms`,
  );
}

try {
  await platform.addProviders(upstream, [20]);
  for (const stream of [false, true]) await window('warm-up', stream);
  console.log(`# ${args.mode}, 64 connections, 20 ms provider; "own core": the platform on CPU ${own}, the rest on ${others}`);
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const stream of [false, true]) {
      for (const pid of [platform.pid, process.pid, upstream.pid]) pin(pid, all);
      await window('shared', stream);
      pin(platform.pid, own);
      pin(process.pid, others);
      pin(upstream.pid, others);
      await window('own core', stream);
    }
  }
} finally {
  await platform.stop();
  await upstream.stop();
}
