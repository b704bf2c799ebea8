// The bench's "floor" path: the least any Node gateway does per chat completion, in its own process.
// It reads the body, parses it, re-serialises it to the upstream over one keep-alive undici pool
// (the same library and settings the platform uses), then parses and re-serialises a JSON answer or
// relays an event stream chunk by chunk. No auth, limits, validation, routing, logging, metrics or
// usage: what it costs is what loopback HTTP and Node's HTTP machinery cost on this machine, so the
// platform's distance from it is the price of what the platform does per request.
// Usage: node bench/floor/proxy.mjs <upstream origin>; paths are passed through (`/d20/v1/...`).
// Prints {"port"} once listening.
import { createServer } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Agent } from 'undici';

const origin = process.argv[2];
if (!origin) throw new Error('usage: node bench/floor/proxy.mjs <upstream origin>');
const agent = new Agent({ connections: 20_000, keepAliveTimeout: 60_000 });

async function forward(req, res, raw) {
  const body = JSON.parse(raw);
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
    return;
  }
  const answer = JSON.stringify(await upstream.body.json());
  res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer) });
  res.end(answer);
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
