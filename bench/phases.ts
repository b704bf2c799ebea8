/**
 * `node --import tsx bench/phases.ts` (after `npm run build`): where a chat request's round trip goes
 * inside the platform at 64 connections over the fake provider (20 ms before its answer), split
 * into phases by Node's and undici's diagnostics channels (`bench/lib/phase-probe.mjs`, preloaded): in (edge, plugins and
 * the chat route until the provider request is made), queued (until undici writes it), provider
 * (until the provider's head is read: its 20 ms plus the wait for this thread to read it), body,
 * out (until the client's answer is finished). Mean, p50, p90 and p99 of each, in ms.
 *   --mode embedded|production (embedded)   --seconds S (8)   --connections N (64)   --stream
 *   --delay MS (the fake provider's delay before its answer; default 20)
 *   --dist DIR (compiled tree, default dist)   --env "KEY=value,…" (settings for the platform: an ablation)
 * The total minus the provider's 20 ms is what the platform added; `in` and `out` are its own
 * work, the rest is waiting (bench/README.md, "Sixteenth pass").
 */
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { percentile, platformTarget, throughput } from './lib/load.js';
import { parseEnvPairs, probedWindow, startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    mode: { type: 'string', default: 'embedded' },
    seconds: { type: 'string', default: '8' },
    connections: { type: 'string', default: '64' },
    delay: { type: 'string', default: '20' },
    stream: { type: 'boolean', default: false },
    dist: { type: 'string', default: 'dist' },
    env: { type: 'string', default: '' },
  },
});

/** The columns of the probe's rows, in order. */
const PHASES = ['in', 'queued', 'provider', 'body', 'out', 'total'] as const;

const out = join(tmpdir(), `bench-phases-${process.pid}.json`);
const probe = pathToFileURL(join(import.meta.dirname, 'lib', 'phase-probe.mjs'));
probe.searchParams.set('out', out);
process.env.BENCH_PLATFORM_NODE_ARGS = `${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''} --import ${probe.href}`;

const upstream = await startUpstream();
const mode = args.mode as PlatformMode;
const platform = await startPlatform(mode, parseEnvPairs(args.env), mode, `${args.dist}/services/platform/main.js`);
try {
  const delayMs = Number(args.delay);
  await platform.addProviders(upstream, [delayMs]);
  const target = platformTarget(platform);
  const load = { connections: Number(args.connections), delayMs, stream: args.stream };
  await throughput(target, { ...load, seconds: 2 }); // warm-up
  const seconds = Number(args.seconds);
  const run = await probedWindow(platform.pid, out, () => throughput(target, { ...load, seconds }));
  const rows = JSON.parse(await readFile(out, 'utf8')) as number[][];
  await rm(out, { force: true });
  console.log(`${mode}, ${load.connections} connections, ${args.stream ? 'stream' : 'non-stream'}, provider delay ${delayMs} ms: ${run.rps.toFixed(0)} req/s, ${run.errors} errors, ${rows.length} requests followed\n`);
  console.log('| phase, ms | mean | p50 | p90 | p99 |\n|---|---|---|---|---|');
  PHASES.forEach((name, column) => {
    const values = rows.map((row) => row[column]!).sort((a, b) => a - b);
    const mean = values.reduce((sum, v) => sum + v, 0) / values.length;
    console.log(`| ${name} | ${[mean, percentile(values, 50), percentile(values, 90), percentile(values, 99)].map((v) => v.toFixed(2)).join(' | ')} |`);
  });
} finally {
  await platform.stop();
  await upstream.stop();
}
