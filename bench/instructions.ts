/**
 * `node --import tsx bench/instructions.ts --a <build dir> --b <build dir>`: machine instructions
 * per chat request of two builds of the platform, counted by valgrind (`--tool=callgrind`), not
 * timed. CPU time per request on this shared machine moves from hour to hour by more than most
 * changes do (the same build read 0.22 ms at one hour and 0.65 ms three hours later), and within an
 * hour by ±5–10 %; an instruction count does not depend on what else the machine runs, so a change
 * worth a few per cent can be told from noise in one run.
 *
 * Both builds start at once, each under callgrind with counting off, on the same fake provider
 * (0 ms). Each gets `--warmup` chat completions one after another through its edge (code reaches
 * its optimised tier), then counting goes on for `--requests` more (`callgrind_control -i on`), and
 * the counts are dumped before the platform stops. Per build it prints instructions per request on
 * the main thread (the event loop's: what its turns are made of), split into JavaScript compiled by
 * V8 (unnamed: JIT code has no symbols here), V8's builtins (interpreter, inline caches, the
 * megamorphic lookups among them), the rest (V8's runtime, Node's C++, libc, OpenSSL), the garbage
 * collector (its pauses, and the sweeping that code needing swept pages finishes outside them) and
 * V8's compiling; on every other thread (the database worker, libuv's pool) and in
 * all; then the main thread's largest named functions for both.
 *
 * What it does not count: time in the kernel (socket writes are a syscall each; `bench/cpu-ab.ts`
 * counts those), and waiting. Under valgrind a request takes ~100–200 ms, so work that runs on a
 * timer (usage flushes, polls) or follows the clock weighs more per request than at full speed, the
 * same on both sides. V8 runs in its predictable mode, without bytecode flushing: compiling and
 * marking then happen on the main thread, where they are counted apart from the requests' own work.
 * The same build twice read 1 171 and 1 201 k instructions per request running the requests in one
 * run, 1 283 and 1 296 k in another: 1–3 % apart within a run, ~10 % between runs. Compare the two
 * sides of one run only, and take under ~3 % as noise.
 *
 * What the warm-up leaves: V8 optimises a function after its bytecode has run a budget several
 * times over, and a function run once per request needs a few thousand requests for that. After
 * 1 500, property loads from Sparkplug (baseline) code were still ~1 500 per request (~700 with
 * `BENCH_PLATFORM_NODE_ARGS="--interrupt-budget=8448"`, which tiers up eight times sooner), where at
 * full speed, seconds into a load, baseline code held ~10 % of JavaScript's ticks (`--prof`). So the
 * builtins (the inline-cache handlers of baseline code) weigh more here than in the steady state;
 * the two sides are warmed alike, so their difference still holds.
 *   --a DIR --b DIR (default dist-before and dist)  --mode embedded|production (embedded)
 *   --warmup N (1500)  --requests N (500)  --stream  --top N (15)
 *   --a-env, --b-env "KEY=value,…"  settings of one side only (the same build twice, one side with a
 *                   feature off: what the feature costs per request)
 *   --keep          keep the callgrind files (one per thread) for callgrind_annotate
 * Needs valgrind (Debian package `valgrind`); takes ~4–5 min, both sides at once on two cores.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { platformTarget } from './lib/load.js';
import { fmt, renderTable, type Row } from './lib/report.js';
import { parseEnvPairs, startPlatform, startUpstream, type Platform, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    a: { type: 'string', default: 'dist-before' },
    b: { type: 'string', default: 'dist' },
    mode: { type: 'string', default: 'embedded' },
    warmup: { type: 'string', default: '1500' },
    requests: { type: 'string', default: '500' },
    stream: { type: 'boolean', default: false },
    top: { type: 'string', default: '15' },
    'a-env': { type: 'string', default: '' },
    'b-env': { type: 'string', default: '' },
    keep: { type: 'boolean', default: false },
  },
});
const warmup = Number(args.warmup);
const counted = Number(args.requests);

/** One callgrind_annotate listing line: its count and the function (`< caller` lines of a caller tree included). */
const LISTING_LINE = /^\s*([\d,]+) \([^)]*\)\s+(<\s+|\*\s+)?(.+?)( \(\d[\d,]*x\))?$/;
const functionName = (raw: string) => raw.replace(/^\?\?\?:/, '').replace(/ \[[^\]]*\]$/, '').replace(/ \(\d[\d,]*x\)$/, '');

function annotate(file: string, options: string[]): string[] {
  return execFileSync('callgrind_annotate', [...options, '--threshold=100', file], { maxBuffer: 256 * 1024 * 1024 }).toString().split('\n');
}

/** Self instructions by function of one thread's callgrind file, from callgrind_annotate. */
function selfByFunction(file: string): Map<string, number> {
  const fns = new Map<string, number>();
  let listing = false;
  for (const line of annotate(file, ['--inclusive=no'])) {
    if (/^Ir\s+file:function/.test(line)) listing = true;
    if (!listing) continue;
    const match = LISTING_LINE.exec(line);
    if (!match || match[2]) continue;
    const name = functionName(match[3]!);
    fns.set(name, (fns.get(name) ?? 0) + Number(match[1]!.replace(/,/g, '')));
  }
  return fns;
}

/** Each function with everything it calls, and the same split by its callers. */
interface CallTree {
  inclusive: Map<string, number>;
  callers: Map<string, Array<[caller: string, instructions: number]>>;
}

/**
 * One pass of the caller tree (`--tree=caller`: each function's block lists its callers, `<`, with
 * what each call cost, then the function's own `*` line with its inclusive count).
 */
function callTree(file: string): CallTree {
  const tree: CallTree = { inclusive: new Map(), callers: new Map() };
  let callers: Array<[string, number]> = [];
  for (const line of annotate(file, ['--inclusive=yes', '--tree=caller'])) {
    const match = LISTING_LINE.exec(line);
    if (!match) {
      callers = [];
      continue;
    }
    const name = functionName(match[3]!);
    const n = Number(match[1]!.replace(/,/g, ''));
    if (match[2]?.startsWith('<')) {
      callers.push([name, n]);
      continue;
    }
    tree.inclusive.set(name, (tree.inclusive.get(name) ?? 0) + n);
    if (callers.length) tree.callers.set(name, [...(tree.callers.get(name) ?? []), ...callers]);
    callers = [];
  }
  return tree;
}

/** What the functions `callee` matches cost, with what they call, when called from a caller `excluded` does not match. */
function inclusiveOutside(tree: CallTree, callee: RegExp, excluded: RegExp): number {
  let total = 0;
  for (const [name, callers] of tree.callers) {
    if (callee.test(name)) total += callers.filter(([caller]) => !excluded.test(caller)).reduce((sum, [, n]) => sum + n, 0);
  }
  return total;
}

/**
 * What V8 does for itself on the main thread, by the entry points that do it, with everything they
 * call (the compiler's own use of malloc, memset and std::map included): compiling, from the
 * runtime calls that compile (TurboFan on a function's tier-up, a lazy function's first call,
 * Sparkplug batches), and the collector's pauses. A collection that starts inside a compile (the
 * compiler allocates) is counted in both; that is rare next to the scavenges requests cause.
 */
const COMPILE_ENTRY = /^v8::internal::Runtime_(CompileOptimized|CompileLazy|CompileBaseline|InstallBaselineCode|BytecodeBudgetInterrupt\w*)\(/;
const GC_ENTRY = /^v8::internal::Heap::CollectGarbage\(/;
/**
 * The collector's work that runs outside its pauses on this thread: sweeping finished on demand.
 * A deoptimisation that materialises objects does it (`TranslatedValue::GetValue` →
 * `Heap::EnsureSweepingCompleted`), and so does an allocation that needs swept pages: what helper
 * threads sweep concurrently at full speed, done here by the first code to need it. One such call
 * in a counted window read 88 k instructions per request (out of ~1 100 k), on one side only.
 */
const SWEEP_ENTRY = /^v8::internal::(Heap::EnsureSweepingCompleted|Sweeper::EnsureCompleted|Sweeper::LocalSweeper::ParallelSweep(Space|Page))\(/;
/** Callers inside the collector, whose sweeping is already in its pause (or counted by another entry). */
const IN_COLLECTOR = /^v8::internal::(Heap::|MarkCompactCollector|MinorMarkCompactCollector|Scaveng|Evacuat|IncrementalMarking|Sweeper|GCTracer)/;
const COMPILER = /v8::internal::(compiler|maglev|baseline|wasm)::|v8::internal::interpreter::Bytecode|v8::internal::(Parser|ParserBase|PreParser|Scanner|Compiler|OptimizingCompileDispatcher)\b|Turboshaft/;

interface MainThread {
  total: number;
  compiling: number;
  collecting: number;
  /** Self instructions of V8's compiled JavaScript (JIT code has no symbols: one bucket) and of its builtins. */
  javascript: number;
  builtins: number;
  self: Map<string, number>;
}

function mainThread(file: string, total: number): MainThread {
  const self = selfByFunction(file);
  const tree = callTree(file);
  let compiling = 0;
  let collecting = 0;
  for (const [name, n] of tree.inclusive) {
    if (COMPILE_ENTRY.test(name)) compiling += n;
    else if (GC_ENTRY.test(name)) collecting += n;
  }
  collecting += inclusiveOutside(tree, SWEEP_ENTRY, IN_COLLECTOR);
  let javascript = 0;
  let builtins = 0;
  for (const [name, n] of self) {
    if (/^0x[0-9a-f]+$/.test(name)) javascript += n;
    else if (name.startsWith('Builtins_')) builtins += n;
  }
  return { total, compiling, collecting, javascript, builtins, self };
}

interface Counted {
  label: string;
  dir: string;
  main: MainThread;
  /** All threads but the main one, summed. */
  others: number;
}

async function measure(label: string, dir: string, env: string, upstream: Awaited<ReturnType<typeof startUpstream>>, outDir: string): Promise<Counted> {
  const platform: Platform = await startPlatform(args.mode as PlatformMode, parseEnvPairs(env), `${label}-callgrind`, `${dir}/services/platform/main.js`);
  try {
    await platform.addProviders(upstream, [0]);
    const call = platformTarget(platform).chat(0, args.stream!);
    const send = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const res = await request(call.url, { method: 'POST', headers: { 'content-type': 'application/json', ...call.headers }, body: call.body });
        await res.body.text();
        if (res.statusCode !== 200) throw new Error(`${label}: a chat completion answered ${res.statusCode}`);
      }
    };
    await send(warmup);
    execFileSync('callgrind_control', ['-i', 'on', String(platform.pid)], { stdio: 'ignore' });
    await send(counted);
    // Dumped while the platform runs: its shutdown is not counted, nor lost if it is cut short.
    execFileSync('callgrind_control', ['-d', String(platform.pid)], { stdio: 'ignore' });
    execFileSync('callgrind_control', ['-i', 'off', String(platform.pid)], { stdio: 'ignore' });
  } finally {
    await platform.stop();
  }
  // The first dump, one file per thread (--separate-threads): `-01` the main thread, then the rest.
  const prefix = `cg.${platform.pid}.out.1-`;
  const files = (await readdir(outDir)).filter((f) => f.startsWith(prefix)).sort();
  if (!files.length) throw new Error(`${label}: callgrind wrote no counts (is valgrind installed?)`);
  let main: MainThread | undefined;
  let others = 0;
  for (const file of files) {
    const total = Number(/^totals: (\d+)/m.exec(await readFile(join(outDir, file), 'utf8'))?.[1] ?? 0);
    if (file.endsWith('-01')) main = mainThread(join(outDir, file), total);
    else others += total;
  }
  if (!main) throw new Error(`${label}: callgrind wrote no file for the main thread`);
  return { label, dir, main, others };
}

const outDir = await mkdtemp(join(tmpdir(), 'bench-instructions-'));
process.env.BENCH_PLATFORM_WRAPPER = `valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --callgrind-out-file=${outDir}/cg.%p.out`;
// V8 in its predictable mode (one thread, fixed seeds: compiling and marking happen on the thread
// that needs them, where they are counted and can be told apart) and without bytecode flushing, so
// the same build counts nearly the same (1–3 %, above); BENCH_PLATFORM_NODE_ARGS applies after these.
process.env.BENCH_PLATFORM_NODE_ARGS = `--predictable --no-flush-bytecode ${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''}`.trim();
const upstream = await startUpstream();
let results: Counted[];
try {
  results = await Promise.all([measure('A', args.a!, args['a-env']!, upstream, outDir), measure('B', args.b!, args['b-env']!, upstream, outDir)]);
} finally {
  await upstream.stop();
}
if (args.keep) console.log(`callgrind files kept in ${outDir} (callgrind_annotate --tree=caller <file> names the callers)`);
else await rm(outDir, { recursive: true, force: true });

const [a, b] = results as [Counted, Counted];
const k = (n: number) => `${fmt(n / counted / 1000, 1)} k`;
console.log(`\n# instructions per ${args.stream ? 'streamed' : 'non-stream'} chat request, ${args.mode} platform, ${counted} requests counted after ${warmup}`);
console.log(`A = ${a.dir}${args['a-env'] ? ` (${args['a-env']})` : ''}, B = ${b.dir}${args['b-env'] ? ` (${args['b-env']})` : ''}\n`);
const running = (m: MainThread) => m.total - m.compiling - m.collecting;
const figures: Array<[string, number, number]> = [
  ['main thread, running the requests', running(a.main), running(b.main)],
  ['  of which JavaScript (JIT code)', a.main.javascript, b.main.javascript],
  ["  of which V8's builtins", a.main.builtins, b.main.builtins],
  ['  of which the rest (V8 runtime, Node, libc)', running(a.main) - a.main.javascript - a.main.builtins, running(b.main) - b.main.javascript - b.main.builtins],
  ['main thread, garbage collector pauses', a.main.collecting, b.main.collecting],
  ['main thread, V8 compiling', a.main.compiling, b.main.compiling],
  ['main thread, all', a.main.total, b.main.total],
  ['other threads', a.others, b.others],
  ['all threads', a.main.total + a.others, b.main.total + b.others],
];
const rows: Row[] = figures.map(([metric, x, y]) => ({ metric, cells: { A: k(x), B: k(y), 'B/A': fmt(y / x, 3) } }));
console.log(renderTable(['A', 'B', 'B/A'], rows, { targets: false }));

console.log(`\n## the main thread's largest named functions, the compiler's own left out (self instructions per request; libc and libstdc++ count whoever called them, the compiler included)`);
const named = [...new Set([...a.main.self.keys(), ...b.main.self.keys()])]
  .filter((name) => !/^0x[0-9a-f]+$/.test(name) && !COMPILER.test(name))
  .map((name) => ({ name, a: a.main.self.get(name) ?? 0, b: b.main.self.get(name) ?? 0 }))
  .sort((x, y) => Math.max(y.a, y.b) - Math.max(x.a, x.b))
  .slice(0, Number(args.top));
for (const f of named) console.log(`${k(f.a).padStart(9)}  ${k(f.b).padStart(9)}  ${f.name.slice(0, 110)}`);
