/**
 * `node --import tsx bench/cpu-ab.ts --a <build dir> --b <build dir>`: CPU and write syscalls per
 * request of two builds of the platform (embedded by default), side by side in the same run. Throughput and
 * latency on a shared machine are noise; the CPU a process spends per request it answered is not
 * (it counts only the process's own time, whatever else runs), nor is the number of write syscalls.
 *
 * Both platforms run on the same fake upstream (20 ms); each round drives each of them in turn
 * (the order rotating) at 64 connections for `--seconds`, non-stream then stream, and reads from
 * /proc before and after: user + system CPU (less the rate measured idle beforehand) of the main thread and of the whole process (the PGlite
 * worker included), and `syscw` (write-family syscalls), and the whole machine's busy CPU (`/proc/stat`:
 * every process, the load generator, this harness reading the platform's log and the fake provider
 * included: on a machine whose cores the platform shares with them, the figure throughput follows).
 * Medians over rounds are printed, and each
 * process's resident set size idle (before any load), at the end of each load window and at its peak,
 * and the event-loop delay p99 of each load window (the platform's own metric, as `npm run bench`
 * reads it).
 *   --a DIR --b DIR  compiled trees (default: dist-before and dist; copy `dist` aside before a change)
 *   --a-node-args, --b-node-args "…"  Node flags of one side only, written `--b-node-args=--flag`, after npm start's
 *                    own flags (package.json's start script), so they win for a flag given twice: the same build
 *                    twice, one side with `--a-node-args=--max-semi-space-size=16` (Node's default), compares the
 *                    young generation npm start sets with the default; BENCH_PLATFORM_NODE_ARGS applies to both
 *   --a-env, --b-env "KEY=value,…"  settings of one side only (an ablation: the same build twice, one side
 *                    with a feature off, says what the feature costs per request)
 *   --mode embedded|production (embedded)  the drivers of both sides: nothing configured, or the local
 *                    PostgreSQL, RabbitMQ and Redis (each side in a schema, exchange and key prefix of its own)
 *   --rounds N (5)  --seconds S (4)  --connections C (64)
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import { chatBody, eventLoopP99, median } from './lib/load.js';
import { machineBusyMs, processCpuMs, startUpstream, type Platform, type PlatformMode } from './lib/procs.js';
import { SIDE_OPTIONS, startSides, type Side } from './lib/sides.js';

const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;

const { values: args } = parseArgs({
  options: {
    ...SIDE_OPTIONS,
    rounds: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '4' },
    connections: { type: 'string', default: '64' },
    mode: { type: 'string', default: 'embedded' },
  },
});
if (args.mode !== 'embedded' && args.mode !== 'production') throw new Error(`--mode takes embedded or production, not ${args.mode}`);
const mode: PlatformMode = args.mode;

const metricsUrl = (platform: Platform) => `${platform.llmUrl}/metrics`;

interface Counters {
  main: number;
  all: number;
  syscw: number;
}

async function counters(pid: number): Promise<Counters> {
  const io = await readFile(`/proc/${pid}/io`, 'utf8').catch(() => '');
  return { ...(await processCpuMs(pid)), syscw: Number(/syscw:\s+(\d+)/.exec(io)?.[1]) };
}

/** Resident set size now and its peak so far (MiB), from /proc/<pid>/status. */
async function memory(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN);
  return { rss: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
}

const upstream = await startUpstream();
const platforms: Side[] = [];
try {
  await startSides(args, mode, upstream, [20], platforms);
  // Background work (bus and outbox polls, the PGlite worker) runs with or without requests: its
  // rate, measured idle, is subtracted so a slow round does not inflate the per-request figure.
  const idle = new Map<string, { main: number; all: number }>();
  const idleRss = new Map<string, number>();
  const loadRss = new Map<string, number[]>();
  for (const { label, platform } of platforms) {
    const before = await counters(platform.pid);
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const after = await counters(platform.pid);
    const seconds = (performance.now() - started) / 1000;
    idle.set(label, { main: (after.main - before.main) / seconds, all: (after.all - before.all) / seconds });
    idleRss.set(label, (await memory(platform.pid)).rss);
  }
  // Warm-up (JIT, caches, connection pools), not counted.
  for (const { platform } of platforms) {
    for (const stream of [false, true]) {
      await autocannon({ url: `${platform.edgeUrl}/v1/chat/completions`, method: 'POST', connections: Number(args.connections), duration: 2, headers: { 'content-type': 'application/json', 'x-api-key': platform.clientKey }, body: chatBody('bench-d20', stream) });
    }
  }
  const samples = new Map<string, { main: number[]; all: number[]; machine: number[]; syscw: number[]; rps: number[]; loop: number[] }>();
  const rounds = Number(args.rounds);
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? platforms : [...platforms].reverse();
    for (const stream of [false, true]) {
      for (const { label, platform } of order) {
        await eventLoopP99(metricsUrl(platform)); // resets its window
        const before = await counters(platform.pid);
        const machineBefore = await machineBusyMs();
        const started = performance.now();
        const result = await autocannon({
          url: `${platform.edgeUrl}/v1/chat/completions`,
          method: 'POST',
          connections: Number(args.connections),
          duration: Number(args.seconds),
          headers: { 'content-type': 'application/json', 'x-api-key': platform.clientKey },
          body: chatBody('bench-d20', stream),
        });
        const machineAfter = await machineBusyMs();
        const after = await counters(platform.pid);
        const seconds = (performance.now() - started) / 1000;
        const loop = await eventLoopP99(metricsUrl(platform));
        loadRss.set(label, [...(loadRss.get(label) ?? []), (await memory(platform.pid)).rss]);
        const background = idle.get(label)!;
        const done = result.requests.total as number;
        const errors = result.errors + result.non2xx + result.timeouts;
        process.stderr.write(`${label} ${stream ? 'stream' : 'json'}: ${done} requests in ${seconds.toFixed(1)} s, ${errors} errors, p50 ${result.latency.p50} ms, CPU main ${after.main - before.main} ms, all ${after.all - before.all} ms, event-loop p99 ${loop.toFixed(1)} ms\n`);
        const key = `${stream ? 'stream' : 'non-stream'} ${label}`;
        const s = samples.get(key) ?? { main: [], all: [], machine: [], syscw: [], rps: [], loop: [] };
        s.main.push((after.main - before.main - background.main * seconds) / done);
        s.all.push((after.all - before.all - background.all * seconds) / done);
        s.machine.push((machineAfter - machineBefore) / done);
        s.syscw.push((after.syscw - before.syscw) / done);
        s.rps.push(result.requests.average);
        s.loop.push(loop);
        samples.set(key, s);
      }
    }
    process.stderr.write(`round ${round + 1}/${rounds} done\n`);
  }
  for (const [label, rate] of idle) console.log(`idle CPU of ${label}: main thread ${rate.main.toFixed(1)} ms/s, whole process ${rate.all.toFixed(1)} ms/s (subtracted)`);
  console.log(`\nA = ${args.a}${args['a-node-args'] ? ` (${args['a-node-args']})` : ''}${args['a-env'] ? ` [${args['a-env']}]` : ''}, B = ${args.b}${args['b-node-args'] ? ` (${args['b-node-args']})` : ''}${args['b-env'] ? ` [${args['b-env']}]` : ''}; ${rounds} rounds × ${args.seconds} s at ${args.connections} connections, 20 ms upstream; medians over rounds\n`);
  console.log('| path | build | CPU ms/request, main thread | whole process | whole machine | write syscalls/request | event-loop p99, ms | req/s (noise) |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const [key, s] of samples) {
    const [kind, label] = key.split(' ');
    console.log(`| ${kind} | ${label} | ${median(s.main).toFixed(3)} | ${median(s.all).toFixed(3)} | ${median(s.machine).toFixed(3)} | ${median(s.syscw).toFixed(2)} | ${median(s.loop).toFixed(1)} | ${median(s.rps).toFixed(0)} |`);
  }
  for (const { label, platform } of platforms) {
    const { peak } = await memory(platform.pid);
    console.log(`RSS of ${label}: idle ${idleRss.get(label)!.toFixed(0)} MiB (before any load), median at the end of a load window ${median(loadRss.get(label)!).toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB`);
  }
  for (const kind of ['non-stream', 'stream']) {
    const a = samples.get(`${kind} A`)!;
    const b = samples.get(`${kind} B`)!;
    console.log(`${kind}: main-thread CPU per request B/A = ${(median(b.main) / median(a.main)).toFixed(3)}, whole process ${(median(b.all) / median(a.all)).toFixed(3)}, whole machine ${(median(b.machine) / median(a.machine)).toFixed(3)}`);
  }
} finally {
  for (const { platform } of platforms) await platform.stop();
  await upstream.stop();
}
