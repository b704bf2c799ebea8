/**
 * `node --import tsx bench/profile.ts` (after `npm run build`): the embedded platform under
 * `node --cpu-prof`, driven at 64 connections (non-stream and stream chat completions through the
 * edge, 20 ms upstream), then a summary of where its CPU went: self time by function and by package
 * or source directory. The raw profile stays in the printed directory (open it in Chrome DevTools).
 *   --seconds S   load per kind (default 10)   --mode embedded|production (default embedded)
 *   --top N       functions listed (default 30)   --kind both|json|stream (default both)
 *   --file F      summarise an existing profile instead of recording one
 *   --env "K=v,…" settings for the platform (e.g. LLM_UPSTREAM_HTTP_VERSION=2: HTTP/2 to the fake provider)
 *   --interval US sampling interval of the recording, µs (Node's default 1000; asking for 100 gave ~250 here,
 *                 fine enough to tell turns of a few ms apart)
 *   --stretches MS  also the main thread's busy stretches (samples in a row with no idle one between:
 *                 one or more turns of the event loop back to back; a due timer still runs between
 *                 two turns, so a stretch bounds the event-loop delay from above, it is not the
 *                 delay), their quantiles, and self time inside the stretches of at least MS ms
 *                 against overall: are the long ones made of different work, or of more of the same?
 *   --within NAME the function whose first and last samples bound the load window (default completeChat,
 *                 the chat handler; `--within writeEventStream` reaches to the end of the last stream, so a
 *                 profile of held streams, e.g. from `bench/held-cpu.ts`, counts their relay too)
 * Only the load window counts (first to last sample in the chat handler): start-up and shutdown are left out.
 */
import { readdir, readFile } from 'node:fs/promises';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { percentile, platformTarget, throughput } from './lib/load.js';
import { parseEnvPairs, startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: { seconds: { type: 'string', default: '10' }, mode: { type: 'string', default: 'embedded' }, top: { type: 'string', default: '30' }, kind: { type: 'string', default: 'both' }, file: { type: 'string' }, env: { type: 'string', default: '' }, interval: { type: 'string' }, stretches: { type: 'string' }, within: { type: 'string', default: 'completeChat' } },
});

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame's code lives: a package, one of our directories, Node's internals, or the VM. */
function area(url: string): string {
  if (!url) return '(vm / native)';
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[0]}`;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  const ours = /\/dist\/(services\/[^/]+(?:\/[^/]+)?|plugins\/[^/]+|workers\/[^/]+)/.exec(url);
  if (ours) return ours[1]!.replace(/\.js$/, '');
  return url.split('/').slice(-2).join('/');
}

/** Runs the platform under the profiler and returns the main thread's profile file. */
async function record(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-profile-'));
  const upstream = await startUpstream();
  process.env.BENCH_PLATFORM_NODE_ARGS = `--cpu-prof --cpu-prof-dir=${dir}${args.interval ? ` --cpu-prof-interval=${Number(args.interval)}` : ''}`;
  const platform = await startPlatform(args.mode as PlatformMode, parseEnvPairs(args.env!));
  try {
    await platform.addProviders(upstream, [20]);
    const target = platformTarget(platform);
    const seconds = Number(args.seconds);
    const kinds = args.kind === 'both' ? [false, true] : [args.kind === 'stream'];
    for (const stream of kinds) {
      const load = await throughput(target, { connections: 64, seconds, delayMs: 20, stream });
      console.log(`load: ${stream ? 'stream' : 'non-stream'} ${load.rps.toFixed(0)} req/s (${load.errors} errors)`);
    }
  } finally {
    await platform.stop();
    await upstream.stop();
  }

  // Node writes one profile per thread (the PGlite worker's too); the main thread's is `.0.`.
  const file = (await readdir(dir)).filter((f) => f.endsWith('.cpuprofile')).sort().find((f) => f.includes('.0.'));
  if (!file) throw new Error(`no profile written in ${dir}`);
  return join(dir, file);
}

const path = args.file ?? (await record());
const profile = JSON.parse(await readFile(path, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
// Only the load window counts: from the first to the last sample inside the chat handler
// (start-up, migrations and module loading before it, and shutdown after it, are left out).
const inChat = new Set<number>();
const mark = (id: number, inside: boolean) => {
  const node = byId.get(id)!;
  const now = inside || node.callFrame.functionName === args.within;
  if (now) inChat.add(id);
  for (const child of node.children ?? []) mark(child, now);
};
mark(profile.nodes[0]!.id, false);
const chatSamples = profile.samples.flatMap((id, i) => (inChat.has(id) ? [i] : []));
const [from, to] = chatSamples.length ? [chatSamples[0]!, chatSamples.at(-1)!] : [0, profile.samples.length - 1];
const self = new Map<number, number>();
profile.samples.forEach((id, i) => {
  if (i >= from && i <= to) self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
const total = [...self.values()].reduce((a, b) => a + b, 0);
const isIdle = (id: number) => ['(idle)', '(program)'].includes(byId.get(id)!.callFrame.functionName);
const idle = [...self].filter(([id]) => isIdle(id)).reduce((a, [, t]) => a + t, 0);
function fnKey(id: number): string {
  const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
  return `${functionName || '(anonymous)'}  ${area(url)}${url ? `:${lineNumber + 1}` : ''}`;
}
const fns = new Map<string, number>();
const areas = new Map<string, number>();
for (const [id, t] of self) {
  if (isIdle(id)) continue;
  const key = fnKey(id);
  const { url } = byId.get(id)!.callFrame;
  fns.set(key, (fns.get(key) ?? 0) + t);
  areas.set(area(url), (areas.get(area(url)) ?? 0) + t);
}
const busy = total - idle;
const pct = (t: number, of = busy) => `${((t / of) * 100).toFixed(1).padStart(5)} %`;
console.log(`\nprofile ${path}: ${(busy / 1e6).toFixed(1)} s busy of ${(total / 1e6).toFixed(1)} s sampled in the load window`);
console.log('\n## self time by area (share of busy time)');
for (const [name, t] of [...areas].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${pct(t)}  ${name}`);
console.log(`\n## top ${args.top} functions by self time`);
for (const [name, t] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, Number(args.top))) console.log(`${pct(t)}  ${name}`);

if (args.stretches !== undefined) {
  const longUs = Number(args.stretches) * 1000;
  // A stretch's time is its busy samples' deltas (µs, as the self times above); `samples` are
  // indices into the profile's samples.
  const stretches: { us: number; samples: number[] }[] = [];
  let current: { us: number; samples: number[] } | undefined;
  for (let i = from; i <= to; i++) {
    if (isIdle(profile.samples[i]!)) {
      current = undefined;
      continue;
    }
    if (!current) stretches.push((current = { us: 0, samples: [] }));
    current.us += profile.timeDeltas[i] ?? 0;
    current.samples.push(i);
  }
  const sorted = stretches.map((s) => s.us).sort((a, b) => a - b);
  const at = (p: number) => (percentile(sorted, p) / 1000).toFixed(2);
  const long = stretches.filter((s) => s.us >= longUs);
  const inLong = new Map<string, number>();
  for (const stretch of long) {
    for (const i of stretch.samples) {
      const key = fnKey(profile.samples[i]!);
      inLong.set(key, (inLong.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0));
    }
  }
  const longTotal = long.reduce((a, s) => a + s.us, 0);
  const intervalUs = (profile.timeDeltas.slice(from, to + 1).reduce((a, b) => a + b, 0) / Math.max(1, to - from)).toFixed(0);
  console.log(`\n## busy stretches (sampled every ~${intervalUs} µs): ${stretches.length}, ms p50 ${at(50)} / p90 ${at(90)} / p99 ${at(99)} / max ${at(100)}`);
  console.log(`${long.length} of them last ${args.stretches} ms or more and hold ${pct(longTotal)} of the busy time; self time inside them (overall beside it):`);
  for (const [name, t] of [...inLong].sort((a, b) => b[1] - a[1]).slice(0, Number(args.top))) console.log(`${pct(t, longTotal)}  (${pct(fns.get(name) ?? 0).trim()})  ${name}`);
}
