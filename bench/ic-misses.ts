/**
 * `node --import tsx bench/ic-misses.ts` (after `npm run build`): the property accesses of a chat
 * request that miss V8's inline caches every time, by source position. The platform runs with V8's
 * `--log-ic`, which logs every inline-cache miss; a site in the megamorphic state that still misses
 * (logged `N->N`) met a map its cache had never seen, so a site that misses about once per request
 * reads objects that get a map of their own per request. Such a site leaves compiled code for V8's
 * runtime on every access, and each such object costs a new map in the old generation. Two causes
 * found this way: `{ ...object, key }` (in Node 20's V8 the result gets a fresh map each time once
 * the spread's inline cache has warmed) and a generator or class made inside a function per
 * request (each has a prototype of its own, so its objects' maps are per request).
 *
 * A warm-up load, then the measured load, both at 64 connections with a 20 ms provider; misses are
 * counted over the whole run and divided by the requests of both loads, so a site that missed only
 * while modules loaded reads as a small fraction and is left out by `--min`.
 *   --mode embedded|production (embedded)  --stream  --seconds S per load (5)
 *   --min M   sites with at least M misses per request (0.05)   --top N (30)   --keep (keep the log)
 *   --dist DIR   another build (a tree outside `dist/` needs `node_modules` beside it)
 * What it cannot see: a megamorphic site whose maps are few enough to stay in V8's stub cache does
 * not miss, so it is not logged, though it is still slower than a monomorphic one.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { platformTarget, throughput } from './lib/load.js';
import { startPlatform, startUpstream, type PlatformMode } from './lib/procs.js';
import { fmt, renderTable, type Row } from './lib/report.js';

const { values: args } = parseArgs({
  options: {
    mode: { type: 'string', default: 'embedded' },
    stream: { type: 'boolean', default: false },
    seconds: { type: 'string', default: '5' },
    min: { type: 'string', default: '0.05' },
    top: { type: 'string', default: '30' },
    keep: { type: 'boolean', default: false },
    dist: { type: 'string', default: 'dist' },
  },
});

/** The code objects V8 logged, by start address, so an inline cache's pc names its function. */
class CodeMap {
  private starts: number[] = [];
  private readonly byStart = new Map<number, { end: number; name: string }>();

  add(start: number, size: number, name: string): void {
    if (!this.byStart.has(start)) this.starts.splice(this.insertionPoint(start), 0, start);
    this.byStart.set(start, { end: start + size, name });
  }

  move(from: number, to: number): void {
    const code = this.byStart.get(from);
    if (!code) return;
    this.byStart.delete(from);
    this.starts.splice(this.insertionPoint(from) - 1, 1);
    this.add(to, code.end - from, code.name);
  }

  nameAt(pc: number): string {
    const start = this.starts[this.insertionPoint(pc) - 1];
    const code = start === undefined ? undefined : this.byStart.get(start);
    return code && pc < code.end ? code.name : '(unknown code)';
  }

  /** The index of the first start above `address`. */
  private insertionPoint(address: number): number {
    let low = 0;
    let high = this.starts.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.starts[mid]! <= address) low = mid + 1;
      else high = mid;
    }
    return low;
  }
}

interface Site {
  kind: string;
  code: string;
  position: string;
  misses: number;
  keys: Map<string, number>;
}

const IC_KINDS = new Set(['LoadIC', 'KeyedLoadIC', 'StoreIC', 'KeyedStoreIC']);

/** Megamorphic misses by site, from a `--log-ic` log (lines `kind,pc,time,line,column,old,new,map,key,…`). */
async function megamorphicMisses(logFile: string): Promise<Site[]> {
  const code = new CodeMap();
  const sites = new Map<string, Site>();
  for await (const line of createInterface({ input: createReadStream(logFile, { encoding: 'latin1' }), crlfDelay: Infinity })) {
    const fields = line.split(',');
    const kind = fields[0]!;
    if (kind === 'code-creation' && fields.length > 6) {
      // code-creation,type,kind,time,address,size,name[,sfi,tier]: the tier marker (~ interpreted,
      // ^ baseline, * optimised) is kept with the name, as V8's own tick processor shows it.
      code.add(Number.parseInt(fields[4]!, 16), Number(fields[5]), `${fields[6]!.trim()}${fields.length > 8 ? ` ${fields.at(-1)}` : ''}`);
    } else if (kind === 'code-move') {
      code.move(Number.parseInt(fields[1]!, 16), Number.parseInt(fields[2]!, 16));
    } else if (IC_KINDS.has(kind) && fields[6] === 'N' && fields.length > 8) {
      const name = code.nameAt(Number.parseInt(fields[1]!, 16));
      const position = `${fields[3]}:${fields[4]}`;
      const id = `${kind} ${name} ${position}`;
      let site = sites.get(id);
      if (!site) sites.set(id, (site = { kind, code: name, position, misses: 0, keys: new Map() }));
      site.misses++;
      site.keys.set(fields[8]!, (site.keys.get(fields[8]!) ?? 0) + 1);
    }
  }
  return [...sites.values()].sort((x, y) => y.misses - x.misses);
}

const dir = await mkdtemp(join(tmpdir(), 'bench-ic-'));
const logFile = join(dir, 'v8.log');
process.env.BENCH_PLATFORM_NODE_ARGS = `--log-ic --logfile=${logFile} --no-logfile-per-isolate ${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''}`.trim();
const upstream = await startUpstream();
const platform = await startPlatform(args.mode as PlatformMode, {}, args.mode, `${args.dist}/services/platform/main.js`);
let requests = 0;
try {
  await platform.addProviders(upstream, [20]);
  const target = platformTarget(platform);
  for (const phase of ['warm-up', 'measured']) {
    const load = await throughput(target, { connections: 64, seconds: Number(args.seconds), delayMs: 20, stream: args.stream });
    requests += Math.round(load.rps * Number(args.seconds));
    console.log(`${phase}: ${load.rps.toFixed(0)} req/s (${load.errors} errors)`);
  }
} finally {
  await platform.stop();
  await upstream.stop();
}

const sites = (await megamorphicMisses(logFile)).filter((s) => s.misses / requests >= Number(args.min));
console.log(`\n# inline-cache sites that missed in the megamorphic state, ${args.dist}, ${args.mode}, ${args.stream ? 'streamed' : 'non-stream'}: ${requests} requests`);
console.log('(code: the function, its source position and V8 tier, ~ interpreted, ^ baseline, * optimised; at: line:column in that source)\n');
const rows: Row[] = sites.slice(0, Number(args.top)).map((s) => ({
  metric: `${s.code.slice(0, 110)} at ${s.position}`,
  cells: {
    kind: s.kind,
    'per request': fmt(s.misses / requests, 3),
    keys: [...s.keys].sort((x, y) => y[1] - x[1]).slice(0, 3).map(([key]) => key.slice(0, 40)).join(' '),
  },
}));
console.log(rows.length ? renderTable(['kind', 'per request', 'keys'], rows, { targets: false }) : `no site missed ${args.min} times per request or more`);
if (args.keep) console.log(`\nlog kept: ${logFile}`);
else await rm(dir, { recursive: true, force: true });
