/**
 * `node --import tsx bench/promotion.ts` (after `npm run build`): how much of each chat request the
 * embedded platform's young-generation collections keep, from V8's own accounting
 * (`--trace-gc-nvp` on the platform, main isolate only), at 64 connections over the 20 ms fake
 * upstream: KiB per request that survived a scavenge and KiB promoted to the old generation, and the
 * scavenges' main-thread pause per request. A request's objects should die young (it lasts ~30 ms,
 * scavenges come every ~60 ms); what is promoted is work for the scavenger's copying and for the old
 * generation's collector, on the main thread and its helper threads.
 *   --seconds S (8)   --stream   --dist DIR (compiled tree, default dist)
 *   --mode embedded|production (default embedded: production runs on the local PostgreSQL,
 *   RabbitMQ and Redis, as `npm run bench` does)
 *   --env "KEY=value,…"   settings for the platform (an ablation)
 * Usually repeatable within ~0.5 KiB per request on an idle machine. Before the platform turned V8's
 * allocation-site pretenuring off (kit heap-tuning.ts), about one process in four promoted six times
 * as much: repeat a surprising figure. bench/alloc.ts --survivors says
 * which allocation sites the survivors come from.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { percentile, platformTarget, throughput } from './lib/load.js';
import { parseEnvPairs, startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: { seconds: { type: 'string', default: '8' }, stream: { type: 'boolean', default: false }, dist: { type: 'string', default: 'dist' }, env: { type: 'string', default: '' }, mode: { type: 'string', default: 'embedded' } },
});
const seconds = Number(args.seconds);
const env = parseEnvPairs(args.env);

process.env.BENCH_PLATFORM_NODE_ARGS = `${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''} --trace-gc-nvp`;
const upstream = await startUpstream();
const mode = args.mode as PlatformMode;
const platform = await startPlatform(mode, env, mode, `${args.dist}/services/platform/main.js`);
const logFile = platform.logFile;
let run;
let log = '';
let mainIsolate: string | undefined;
try {
  await platform.addProviders(upstream, [20]);
  const target = platformTarget(platform);
  await throughput(target, { connections: 64, seconds: 3, delayMs: 20, stream: args.stream }); // warm-up
  const before = (await readFile(logFile, 'utf8')).length;
  run = await throughput(target, { connections: 64, seconds, delayMs: 20, stream: args.stream });
  const whole = await readFile(logFile, 'utf8');
  log = whole.slice(before);
  // The main isolate collects first: loading the services allocates megabytes before the PGlite
  // worker, an isolate of its own, exists. Within the load window either may come first (in a
  // stream run the worker's collections often do), so the window alone cannot tell them apart.
  mainIsolate = new RegExp(`\\[${platform.pid}:(0x[0-9a-f]+)\\]`).exec(whole)?.[1];
} finally {
  await platform.stop();
  await upstream.stop();
}

// One line per collection: `[pid:isolate] … pause=… gc=s … promoted=… new_space_survived=…`, of the
// main isolate only (worker threads, the PGlite worker, are isolates of their own).
const field = (line: string, name: string) => Number(new RegExp(` ${name}=([0-9.]+)`).exec(line)?.[1] ?? 0);
let promoted = 0;
let survived = 0;
const pauses: number[] = [];
const marks: string[] = [];
for (const line of log.split('\n')) {
  if (!mainIsolate || !line.includes(mainIsolate)) continue;
  if (line.includes(' gc=s ')) {
    promoted += field(line, 'promoted');
    survived += field(line, 'new_space_survived');
    pauses.push(field(line, 'pause'));
  } else if (/ gc=(mc|mmc|ms) /.test(line)) {
    // A collection of the old generation (mark-compact and its incremental steps).
    marks.push(`${/ gc=(\w+) /.exec(line)![1]} ${field(line, 'pause').toFixed(1)} ms`);
  }
}
const scavenges = pauses.length;
const pauseMs = pauses.reduce((sum, ms) => sum + ms, 0);
const requests = run.rps * seconds;
const perRequest = (bytes: number) => (bytes / requests / 1024).toFixed(2);
console.log(`${args.dist}, ${mode}, ${args.stream ? 'stream' : 'non-stream'}${args.env ? `, ${args.env}` : ''}: ${run.rps.toFixed(0)} req/s for ${seconds} s, ${scavenges} scavenges`);
pauses.sort((a, b) => a - b);
const pauseAt = (p: number) => (scavenges ? percentile(pauses, p) : 0).toFixed(2);
// Each pause delays every request in flight at once: it is what the event-loop delay's tail is made of.
console.log(`scavenge pause each: p50 ${pauseAt(50)} ms, p90 ${pauseAt(90)} ms, max ${pauseAt(100)} ms, one every ${((seconds * 1000) / Math.max(1, scavenges)).toFixed(0)} ms; old-generation collections: ${marks.length ? marks.join(', ') : 'none'}`);
console.log(`per request: ${perRequest(survived)} KiB survived a scavenge, ${perRequest(promoted)} KiB promoted, ${((pauseMs * 1000) / requests).toFixed(1)} µs of scavenge pause on the main thread`);
