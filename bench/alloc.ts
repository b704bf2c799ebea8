/**
 * `node --import tsx bench/alloc.ts` (after `npm run build`): what one chat request allocates in the
 * embedded platform, garbage included (V8's sampling heap profiler with the objects minor and major
 * GCs took, preloaded by `bench/lib/alloc-sampler.mjs`), at 64 connections over the 20 ms fake
 * upstream: KiB per request in total and by allocating function and its caller.
 *   --seconds S (6)   --stream   --top N (30)   --dist DIR (compiled tree, default dist)
 *   --survivors   count only what outlived a young-generation collection (what the scavenger copies
 *                 and promotes), not every allocation
 *   --mode embedded|production (default embedded: production runs on the local PostgreSQL,
 *                 RabbitMQ and Redis, as `npm run bench` does)
 *   --env "KEY=value,…"   settings for the platform (an ablation)
 *   --file F (summarise a saved profile; needs --requests)
 *   --held N      instead of the 64-connection load, N streams held at once (a chunk each every 500 ms,
 *                 as in `npm run bench`'s ramp), sampled for --seconds once all are open: KiB per
 *                 relayed chunk (what holding streams costs the collector, `bench/held-cpu.ts`)
 * The garbage collector's share of CPU (bench/profile.ts) follows the allocation rate: this says where it comes from.
 */
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { platformTarget, throughput, whileHeld, type Target } from './lib/load.js';
import { parseEnvPairs, probedWindow, startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: { seconds: { type: 'string', default: '6' }, stream: { type: 'boolean', default: false }, top: { type: 'string', default: '30' }, dist: { type: 'string', default: 'dist' }, file: { type: 'string' }, requests: { type: 'string' }, survivors: { type: 'boolean', default: false }, mode: { type: 'string', default: 'embedded' }, env: { type: 'string', default: '' }, held: { type: 'string' } },
});

interface SampleNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children?: SampleNode[];
}

async function record(): Promise<{ file: string; requests: number }> {
  const sampler = new URL('./lib/alloc-sampler.mjs', import.meta.url);
  if (args.survivors) sampler.search = '?survivors';
  process.env.BENCH_PLATFORM_NODE_ARGS = `${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''} --import ${sampler.href}`;
  const upstream = await startUpstream();
  const mode = args.mode as PlatformMode;
  const platform = await startPlatform(mode, parseEnvPairs(args.env), mode, `${args.dist}/services/platform/main.js`);
  const file = join(tmpdir(), `bench-alloc-${platform.pid}.json`);
  try {
    await platform.addProviders(upstream, args.held ? [0, 20] : [20]); // held streams ask the 0 ms provider, as the ramp does
    const target = platformTarget(platform);
    await throughput(target, { connections: 64, seconds: 2, delayMs: 20, stream: args.stream }); // warm-up
    const seconds = Number(args.seconds);
    if (args.held) return { file, requests: await sampleHeld(platform.pid, file, target, Number(args.held), seconds) };
    const run = await probedWindow(platform.pid, file, () => throughput(target, { connections: 64, seconds, delayMs: 20, stream: args.stream }));
    console.log(`load: ${run.rps.toFixed(0)} req/s for ${seconds} s (${run.errors} errors)`);
    return { file, requests: Math.round(run.rps * seconds) };
  } finally {
    await platform.stop();
    await upstream.stop();
  }
}

/** Holds `streams` streams, samples `seconds` once all are open, and returns the chunks relayed in that window. */
async function sampleHeld(pid: number, file: string, target: Target, streams: number, seconds: number): Promise<number> {
  const intervalMs = 500;
  const { held } = await whileHeld(target, { streams, intervalMs, windowMs: seconds * 1000 }, () => probedWindow(pid, file, () => sleep(seconds * 1000)));
  console.log(`held: ${streams} streams, ${held.stalled} stalled, ${held.failed} failed; sampled for ${seconds} s once all were open`);
  return Math.round((streams * seconds * 1000) / intervalMs);
}

const { file, requests } = args.file ? { file: args.file, requests: Number(args.requests) } : await record();
const profile = JSON.parse(await readFile(file, 'utf8')) as { head: SampleNode };
const label = (n: SampleNode) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/.*\/(dist|node_modules)\//, '')}:${n.callFrame.lineNumber + 1}`;
const sites = new Map<string, number>();
let total = 0;
const walk = (node: SampleNode, caller: string) => {
  const here = label(node);
  if (node.selfSize) {
    total += node.selfSize;
    const key = `${here}  <  ${caller}`;
    sites.set(key, (sites.get(key) ?? 0) + node.selfSize);
  }
  for (const child of node.children ?? []) walk(child, here);
};
walk(profile.head, '');
const kib = (bytes: number) => (bytes / requests / 1024).toFixed(2).padStart(6);
console.log(`\n${file}: ${kib(total)} KiB ${args.survivors ? 'outlived a young-generation collection' : 'allocated'} per ${args.held ? 'relayed chunk' : 'request'} (${requests} ${args.held ? `chunks of ${args.held} held streams` : `requests, ${args.stream ? 'stream' : 'non-stream'}`})\n`);
for (const [site, bytes] of [...sites].sort((a, b) => b[1] - a[1]).slice(0, Number(args.top))) console.log(`${kib(bytes)} KiB  ${((bytes / total) * 100).toFixed(1).padStart(4)} %  ${site}`);
