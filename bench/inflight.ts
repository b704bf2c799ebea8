/**
 * `node --import tsx bench/inflight.ts` (after `npm run build`): what one chat request keeps on the
 * embedded platform's heap while it waits on its provider. That is what every young-generation
 * collection copies, once per request in flight, so it sets the scavenges' pause, which makes up
 * the tail of the event-loop delay under load. Unlike CPU time on a shared machine, the figure
 * repeats within a few per cent.
 *
 * `--requests` chat completions are held open on a fake provider that answers after 4 s. The
 * platform writes a heap snapshot with them in flight and another after they ended, on the same
 * connections. The difference, divided by the requests, is printed by object type and name.
 * Code, maps and feedback are left out: they are compiled once, not kept per request.
 *   --requests N (256)  --stream  --top N (40)  --dist DIR (compiled tree, default dist)
 *   --owners       label each object with what holds it (`Object <- ServiceRequest.params`)
 *   --expand PREFIX  for labels starting with PREFIX, also what holds the holder
 *   --contexts     name each closure context by the variables it keeps (`Context{req,res,started}`),
 *                  which tells whose anonymous closures a request keeps alive
 */
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { chatBody } from './lib/load.js';
import { startPlatform, startUpstream } from './lib/procs.js';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '256' },
    stream: { type: 'boolean', default: false },
    top: { type: 'string', default: '40' },
    dist: { type: 'string', default: 'dist' },
    owners: { type: 'boolean', default: false },
    expand: { type: 'string' },
    contexts: { type: 'boolean', default: false },
  },
});
const count = Number(args.requests);
const PROVIDER_DELAY_MS = 4_000;

const dir = await mkdtemp(join(tmpdir(), 'bench-inflight-'));
process.env.BENCH_PLATFORM_NODE_ARGS = `${process.env.BENCH_PLATFORM_NODE_ARGS ?? ''} --heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dir}`;
const upstream = await startUpstream();
const platform = await startPlatform('embedded', {}, 'inflight', `${args.dist}/services/platform/main.js`);

const chat = (delayMs: number) =>
  fetch(`${platform.edgeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'x-api-key': platform.clientKey, 'content-type': 'application/json' },
    body: chatBody(`bench-d${delayMs}`, args.stream),
  }).then(async (res) => {
    const text = await res.text();
    if (res.status !== 200) throw new Error(`chat answered ${res.status}: ${text.slice(0, 300)}`);
  });
const all = (delayMs: number) => Promise.all(Array.from({ length: count }, () => chat(delayMs)));

/** Asks for a snapshot and returns its path once Node has finished writing it (its size stops changing). */
async function snapshot(): Promise<string> {
  const before = new Set(await readdir(dir));
  platform.child.kill('SIGUSR2');
  let file: string | undefined;
  while (!file) {
    await sleep(100);
    file = (await readdir(dir)).find((name) => name.endsWith('.heapsnapshot') && !before.has(name));
  }
  const path = join(dir, file);
  for (let last = -1; ; ) {
    await sleep(700);
    const { size } = await stat(path);
    if (size > 0 && size === last) return path;
    last = size;
  }
}

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

/** Bytes and objects by label (`type:name`, with `--owners` what holds each). */
async function tally(path: string): Promise<Map<string, { objects: number; bytes: number }>> {
  const heap = JSON.parse(await readFile(path, 'utf8')) as Snapshot;
  const meta = heap.snapshot.meta;
  const width = meta.node_fields.length;
  const [typeAt, nameAt, sizeAt, edgesAt] = ['type', 'name', 'self_size', 'edge_count'].map((f) => meta.node_fields.indexOf(f)) as [number, number, number, number];
  const edgeWidth = meta.edge_fields.length;
  const [edgeTypeAt, edgeNameAt, edgeToAt] = ['type', 'name_or_index', 'to_node'].map((f) => meta.edge_fields.indexOf(f)) as [number, number, number];
  // Where each node's edges start in `edges` (a node's edges follow the previous node's), by node ordinal.
  const firstEdge = new Uint32Array(args.contexts ? heap.nodes.length / width : 0);
  for (let ordinal = 1; ordinal < firstEdge.length; ordinal++) {
    firstEdge[ordinal] = firstEdge[ordinal - 1]! + heap.nodes[(ordinal - 1) * width + edgesAt]! * edgeWidth;
  }
  // A closure's context by the variables it keeps (`Context{req,res,started}`): anonymous closures
  // are otherwise all alike, and the names say whose they are.
  const contextVariables = (node: number) => {
    const names: string[] = [];
    for (let left = heap.nodes[node + edgesAt]!, edge = firstEdge[node / width]!; left > 0; left--, edge += edgeWidth) {
      if (meta.edge_types[0][heap.edges[edge + edgeTypeAt]!] === 'context') names.push(String(heap.strings[heap.edges[edge + edgeNameAt]!]));
    }
    return `{${names.join(',').slice(0, 120)}}`;
  };
  const label = (node: number) => {
    const type = meta.node_types[0][heap.nodes[node + typeAt]!]!;
    const name = type.includes('string') ? '(string)' : heap.strings[heap.nodes[node + nameAt]!]!.slice(0, 50);
    return `${type}:${name}${args.contexts && name === 'system / Context' ? contextVariables(node) : ''}`;
  };
  // What first holds each node (weak references aside): enough to tell whose object it is.
  const holder = new Map<number, { node: number; via: string }>();
  if (args.owners) {
    for (let node = 0, edge = 0; node < heap.nodes.length; node += width) {
      for (let left = heap.nodes[node + edgesAt]!; left > 0; left--, edge += edgeWidth) {
        const to = heap.edges[edge + edgeToAt]!;
        const edgeType = meta.edge_types[0][heap.edges[edge + edgeTypeAt]!]!;
        if (edgeType === 'weak' || holder.has(to)) continue;
        const via = edgeType === 'element' || edgeType === 'hidden' ? '[]' : String(heap.strings[heap.edges[edge + edgeNameAt]!]).slice(0, 30);
        holder.set(to, { node, via });
      }
    }
  }
  const held = (node: number) => {
    const by = holder.get(node);
    return by ? `${label(by.node)}.${by.via}` : '?';
  };
  const totals = new Map<string, { objects: number; bytes: number }>();
  for (let node = 0; node < heap.nodes.length; node += width) {
    let key = label(node);
    if (args.owners) key += `  <-  ${held(node)}`;
    if (args.expand && key.startsWith(args.expand)) {
      const by = holder.get(node);
      key += `  <-  ${by ? held(by.node) : '?'}`;
    }
    const total = totals.get(key) ?? { objects: 0, bytes: 0 };
    total.objects++;
    total.bytes += heap.nodes[node + sizeAt]!;
    totals.set(key, total);
  }
  return totals;
}

const compiledOnce = (key: string) => /^(code|object shape|hidden:system \/ (Code|Feedback|Bytecode))/.test(key) || key.includes('ModuleJob');

try {
  await platform.addProviders(upstream, [PROVIDER_DELAY_MS, 0]);
  // Warm: the connections, the code paths, and the slow model's own (so the second snapshot differs only by the requests).
  for (let round = 0; round < 3; round++) await all(0);
  await all(PROVIDER_DELAY_MS);
  const held = all(PROVIDER_DELAY_MS);
  await sleep(1_500); // every request is at its provider by now (the fake answers after 4 s)
  const during = await tally(await snapshot());
  await held;
  const after = await tally(await snapshot());

  const rows = [...during]
    .filter(([key]) => !compiledOnce(key))
    .map(([key, d]) => ({ key, objects: d.objects - (after.get(key)?.objects ?? 0), bytes: d.bytes - (after.get(key)?.bytes ?? 0) }))
    .filter((row) => row.bytes > 0)
    .sort((a, b) => b.bytes - a.bytes);
  const total = rows.reduce((sum, row) => sum + row.bytes, 0);
  console.log(`${args.dist}, ${args.stream ? 'stream' : 'non-stream'}: ${count} chat requests in flight keep ${(total / count / 1024).toFixed(2)} KiB each on the heap`);
  for (const row of rows.slice(0, Number(args.top))) {
    console.log(`${(row.bytes / count).toFixed(0).padStart(6)} B  ${(row.objects / count).toFixed(2).padStart(6)} objects  ${row.key}`);
  }
} finally {
  await platform.stop();
  await upstream.stop();
  await rm(dir, { recursive: true, force: true });
}
