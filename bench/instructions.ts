/**
 * `node --import tsx bench/instructions.ts --a <build dir> --b <build dir>`: machine instructions
 * per chat request of two builds of the platform, counted by valgrind (`--tool=callgrind`), not
 * timed. CPU time per request on this shared machine moves from hour to hour by more than most
 * changes do (the same build read 0.22 ms at one hour and 0.65 ms three hours later), and within an
 * hour by ±5–10 %; an instruction count does not depend on what else the machine runs, so a change
 * worth 2 % can be told from noise in one run.
 *
 * Both builds start at once, each under callgrind with counting off, on the same fake provider
 * (0 ms). Each gets `--warmup` chat completions one after another through its edge (code reaches
 * its optimised tier), then counting goes on for `--requests` more (`callgrind_control -i on`), and
 * the counts are dumped before the platform stops. Per build it prints instructions per request on the main
 * thread (the event loop's: what the turns are made of), on every other thread (the database
 * worker, V8's compiler and GC helpers, libuv's pool) and in all; the main thread split into
 * JavaScript compiled by V8 (unnamed: JIT code has no symbols here), V8's builtins (interpreter,
 * inline caches, the megamorphic lookups among them), the garbage collector, and the rest (V8's
 * runtime, Node's C++, libc, OpenSSL); then the main thread's largest named functions for both.
 *
 * What it does not count: time in the kernel (socket writes are a syscall each; `bench/cpu-ab.ts`
 * counts those), and waiting. Under valgrind a request takes ~100–200 ms, so work that runs on a
 * timer (usage flushes, polls) weighs more per request than at full speed; it weighs alike on
 * both sides. The same build twice (`--a dist --b dist`) read 1.2–2.4 % apart on the main thread
 * here: smaller differences are noise.
 *   --a DIR --b DIR (default dist-before and dist)  --mode embedded|production (embedded)
 *   --warmup N (1500)  --requests N (300)  --stream  --top N (15)
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
import { parseEnvPairs, startPlatform, startUpstream, type Platform, type PlatformMode } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    a: { type: 'string', default: 'dist-before' },
    b: { type: 'string', default: 'dist' },
    mode: { type: 'string', default: 'embedded' },
    warmup: { type: 'string', default: '1500' },
    requests: { type: 'string', default: '300' },
    stream: { type: 'boolean', default: false },
    top: { type: 'string', default: '15' },
    'a-env': { type: 'string', default: '' },
    'b-env': { type: 'string', default: '' },
    keep: { type: 'boolean', default: false },
  },
});
const warmup = Number(args.warmup);
const counted = Number(args.requests);

/** Self instructions by function of one thread's callgrind file, from callgrind_annotate. */
function functionsOf(file: string): Map<string, number> {
  const text = execFileSync('callgrind_annotate', ['--inclusive=no', '--threshold=100', file], { maxBuffer: 256 * 1024 * 1024 }).toString();
  const fns = new Map<string, number>();
  let listing = false;
  for (const line of text.split('\n')) {
    if (/^Ir\s+file:function/.test(line)) listing = true;
    if (!listing) continue;
    const match = /^\s*([\d,]+) \([^)]*\)\s+(.+)$/.exec(line);
    if (!match) continue;
    const name = match[2]!.replace(/^\?\?\?:/, '').replace(/ \[[^\]]*\]$/, '');
    fns.set(name, (fns.get(name) ?? 0) + Number(match[1]!.replace(/,/g, '')));
  }
  return fns;
}

const GC = /Scaveng|Marking|Sweep|Evacuat|Heap::|GCTracer|IterateObjectCache|RememberedSet|SlotSet|Compactor|MinorMC|RootVisitor|ConcurrentMark/;
const COMPILER = /v8::internal::(compiler|maglev|baseline|wasm)::|v8::internal::interpreter::Bytecode|v8::internal::(Parser|ParserBase|PreParser|Scanner|Compiler|OptimizingCompileDispatcher)\b|Turboshaft/;
const JIT = 'JavaScript (JIT code)';
const BUILTINS = "V8's builtins";
const COMPILING = 'V8 compiling';
const GC_PART = 'garbage collector';
const REST = 'the rest (V8 runtime, Node, libc)';

/** JIT code, builtins, the compiler, the collector, the rest: where one thread's instructions went. */
function split(fns: Map<string, number>): Record<string, number> {
  const parts = { [JIT]: 0, [BUILTINS]: 0, [COMPILING]: 0, [GC_PART]: 0, [REST]: 0 };
  for (const [name, n] of fns) {
    if (/^0x[0-9a-f]+$/.test(name)) parts[JIT] += n;
    else if (name.startsWith('Builtins_')) parts[BUILTINS] += n;
    else if (COMPILER.test(name)) parts[COMPILING] += n;
    else if (GC.test(name)) parts[GC_PART] += n;
    else parts[REST] += n;
  }
  return parts;
}

interface Counted {
  label: string;
  dir: string;
  main: number;
  others: number;
  mainFns: Map<string, number>;
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
  let main = 0;
  let others = 0;
  let mainFns = new Map<string, number>();
  for (const file of files) {
    const total = Number(/^totals: (\d+)/m.exec(await readFile(join(outDir, file), 'utf8'))?.[1] ?? 0);
    if (file.endsWith('-01')) {
      main = total;
      mainFns = functionsOf(join(outDir, file));
    } else others += total;
  }
  return { label, dir, main: main / counted, others: others / counted, mainFns };
}

const outDir = await mkdtemp(join(tmpdir(), 'bench-instructions-'));
process.env.BENCH_PLATFORM_WRAPPER = `valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --callgrind-out-file=${outDir}/cg.%p.out`;
// V8 in its predictable mode (one thread, fixed seeds: compiling and marking happen on the thread
// that needs them, where they are counted and can be told apart) and without bytecode flushing, so
// the same build counts the same; BENCH_PLATFORM_NODE_ARGS still applies after these.
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
const k = (n: number) => `${(n / 1000).toFixed(1)} k`;
const ratio = (x: number, y: number) => (y ? (x / y).toFixed(3) : '-');
console.log(`\n# instructions per ${args.stream ? 'streamed' : 'non-stream'} chat request, ${args.mode} platform, ${counted} requests counted after ${warmup}`);
console.log(`A = ${a.dir}${args['a-env'] ? ` (${args['a-env']})` : ''}, B = ${b.dir}${args['b-env'] ? ` (${args['b-env']})` : ''}\n`);
const splitA = split(a.mainFns);
const splitB = split(b.mainFns);
const per = (parts: Record<string, number>, ...names: string[]) => names.reduce((sum, name) => sum + parts[name]!, 0) / counted;
const running = [JIT, BUILTINS, REST];
const rows: Array<[string, number, number]> = [
  ['main thread, running the requests', per(splitA, ...running), per(splitB, ...running)],
  ...running.map((part): [string, number, number] => [`  of which ${part}`, per(splitA, part), per(splitB, part)]),
  ['main thread, garbage collector', per(splitA, GC_PART), per(splitB, GC_PART)],
  ['main thread, V8 compiling', per(splitA, COMPILING), per(splitB, COMPILING)],
  ['main thread, all', a.main, b.main],
  ['other threads', a.others, b.others],
  ['all threads', a.main + a.others, b.main + b.others],
];
const width = Math.max(...rows.map((r) => r[0].length));
console.log(`${'figure'.padEnd(width)}  ${'A'.padStart(10)}  ${'B'.padStart(10)}  B/A`);
for (const [name, x, y] of rows) console.log(`${name.padEnd(width)}  ${k(x).padStart(10)}  ${k(y).padStart(10)}  ${ratio(y, x)}`);

console.log(`\n## the main thread's largest named functions, compiling left out (self instructions per request)`);
const named = [...new Set([...a.mainFns.keys(), ...b.mainFns.keys()])]
  .filter((name) => !/^0x[0-9a-f]+$/.test(name) && !COMPILER.test(name))
  .map((name) => ({ name, a: (a.mainFns.get(name) ?? 0) / counted, b: (b.mainFns.get(name) ?? 0) / counted }))
  .sort((x, y) => Math.max(y.a, y.b) - Math.max(x.a, x.b))
  .slice(0, Number(args.top));
for (const f of named) console.log(`${k(f.a).padStart(9)}  ${k(f.b).padStart(9)}  ${f.name.slice(0, 110)}`);
