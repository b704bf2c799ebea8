// The bench's "floor" path: the least any Node gateway does per chat completion, in its own process.
// It reads the body, parses it, re-serialises it to the upstream over one keep-alive undici pool
// (the same library and settings the platform uses), then parses and re-serialises a JSON answer or
// relays an event stream chunk by chunk. No auth, limits, validation, routing, logging, metrics or
// usage: what it costs is what loopback HTTP and Node's HTTP machinery cost on this machine, so the
// platform's distance from it is the price of what the platform does per request.
// Usage: node bench/floor/proxy.mjs <upstream origin>; paths are passed through (`/d20/v1/...`).
// Prints {"port"} once listening. FLOOR_SPIN_US=<µs> adds that much busy work to each request, on the
// main thread in the turn that reads it; FLOOR_ALLOC_KB=<KiB> allocates that much in small objects in
// that turn, of which FLOOR_KEEP_KB=<KiB> stay reachable until the answer is written (what a request
// of the platform keeps while it waits on its provider); FLOOR_BACKGROUND_US=<µs> has a worker thread
// spend that much per request answered, once a second for the second's requests (what the platform's
// database thread does with its batched writes). bench/cpu-budget.ts: a relay that costs more per
// request, in CPU, in the collector's work and on a second thread.
import { createServer } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { Agent } from 'undici';

const origin = process.argv[2];
if (!origin) throw new Error('usage: node bench/floor/proxy.mjs <upstream origin>');
const agent = new Agent({ connections: 20_000, keepAliveTimeout: 60_000 });
const spinNs = BigInt(Math.round(Number(process.env.FLOOR_SPIN_US ?? 0) * 1000));

const allocKb = Number(process.env.FLOOR_ALLOC_KB ?? 0);
const keepKb = Math.min(allocKb, Number(process.env.FLOOR_KEEP_KB ?? 0));
// A small object ({ n, next } plus its header) is about 24 bytes on the heap.
const objectsPerKb = 1024 / 24;

/** Where the garbage goes, so no compiler can prove it unused. */
let sink = null;

function allocate(kb) {
  let list = null;
  for (let i = 0; i < kb * objectsPerKb; i++) list = { n: i, next: list };
  return list;
}

function spin() {
  const until = process.hrtime.bigint() + spinNs;
  while (process.hrtime.bigint() < until);
}

const backgroundUs = Number(process.env.FLOOR_BACKGROUND_US ?? 0);
let answered = 0;
if (backgroundUs > 0) {
  const background = new Worker(
    `const { parentPort } = require('node:worker_threads');
     parentPort.on('message', (us) => { const until = process.hrtime.bigint() + BigInt(Math.round(us * 1000)); while (process.hrtime.bigint() < until); });`,
    { eval: true },
  );
  background.unref();
  setInterval(() => {
    if (answered > 0) background.postMessage(answered * backgroundUs);
    answered = 0;
  }, 1000).unref();
}

async function forward(req, res, raw) {
  if (backgroundUs > 0) answered++;
  const body = JSON.parse(raw);
  if (spinNs > 0n) spin();
  // Reachable from this frame while the request waits on the provider; let go once it is answered.
  let kept = null;
  if (allocKb > 0) {
    kept = allocate(keepKb);
    sink = allocate(allocKb - keepKb);
  }
  const upstream = await agent.request({
    origin,
    path: req.url,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer bench' },
    body: JSON.stringify(body),
  });
  if (body.stream) {
    res.writeHead(upstream.statusCode, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for await (const chunk of upstream.body) res.write(chunk);
    res.end();
    kept = null;
    return;
  }
  const answer = JSON.stringify(await upstream.body.json());
  res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer) });
  res.end(answer);
  kept = null;
}

// The platform's event-loop figure, measured the same way (kit/http/metrics.ts: the lateness of a
// 10 ms timer since the previous scrape), so the table shows what saturation alone does to the loop.
const RESOLUTION_MS = 10;
const loop = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
loop.enable();
function loopMetrics(res) {
  const late = (ns) => Math.max(0, ns / 1e6 - RESOLUTION_MS) / 1000;
  const lines = [0.5, 0.9, 0.99].map((q) => `nodejs_eventloop_delay_seconds{quantile="${q}"} ${late(loop.percentile(q * 100))}`);
  lines.push(`nodejs_eventloop_delay_seconds{quantile="1"} ${late(loop.max)}`);
  loop.reset();
  res.writeHead(200, { 'content-type': 'text/plain' }).end(`${lines.join('\n')}\n`);
}

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/metrics') return loopMetrics(res);
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    forward(req, res, Buffer.concat(chunks).toString('utf8')).catch(() => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
  });
});
server.keepAliveTimeout = 60_000;
server.headersTimeout = 20_000;
server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
