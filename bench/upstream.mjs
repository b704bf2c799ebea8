// The benchmark's fake OpenAI-compatible upstream, in its own process. Lean on purpose (no request
// log, no parsing beyond what routing needs) so the "direct" figures measure loopback HTTP, not
// the fake. The first path segment picks the delay before the response head: `/d0/v1/...`,
// `/d20/v1/...`. Chat bodies:
//   stream: false  one small chat.completion (JSON)
//   stream: true   5 content chunks, a usage chunk and `data: [DONE]`, written back to back
//                  ("#chunks:<n>" in the last message: n content chunks, as a long answer from a fast provider)
//   "#slow:<ms> #chunks:<n>" in the last message: n chunks, one every <ms> (held-stream ramp)
// `GET /d<ms>/v1/models` lists the model `bench-d<ms>`. The same answers over HTTP/2 by prior
// knowledge (h2c) on a second port, for a platform with LLM_UPSTREAM_HTTP_VERSION=2. Given a key and
// certificate (BENCH_UPSTREAM_TLS_KEY, BENCH_UPSTREAM_TLS_CERT: files), the same over TLS on a third,
// offering HTTP/2 and HTTP/1.1 in the handshake (HTTP/2 preferred), as hosted providers do. Prints
// {"port","h2Port"[,"tlsPort"]} once all listen.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createH2Server, createSecureServer } from 'node:http2';

const completion = (model) =>
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: 1700000000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'Hello from the bench upstream.' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 8, completion_tokens: 6, total_tokens: 14 },
  });

const chunk = (model, delta, finish = null) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1700000000, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

function streamBody(model, n) {
  let out = chunk(model, { role: 'assistant', content: '' });
  for (let i = 0; i < n; i++) out += chunk(model, { content: `w${i} ` });
  out += chunk(model, {}, 'stop');
  out += `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1700000000, model, choices: [], usage: { prompt_tokens: 8, completion_tokens: n, total_tokens: 8 + n } })}\n\n`;
  return out + 'data: [DONE]\n\n';
}

const SSE_HEAD = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };

function answer(req, res, delay, raw) {
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' });
    return res.end('{"error":{"message":"bad json","type":"invalid_request_error"}}');
  }
  const model = body.model ?? `bench-d${delay}`;
  if (!body.stream) {
    const json = completion(model);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
    return res.end(json);
  }
  const last = body.messages?.[body.messages.length - 1]?.content ?? '';
  const slow = typeof last === 'string' && last.startsWith('#slow:') ? /#slow:(\d+) #chunks:(\d+)/.exec(last) : null;
  if (!slow) {
    const many = typeof last === 'string' ? /#chunks:(\d+)/.exec(last) : null;
    const sse = streamBody(model, many ? Math.min(Number(many[1]), 100_000) : 5);
    res.writeHead(200, SSE_HEAD); // chunked, as real providers stream
    return res.end(sse);
  }
  const interval = Number(slow[1]);
  const total = Number(slow[2]);
  res.writeHead(200, SSE_HEAD);
  res.write(chunk(model, { role: 'assistant', content: '' }));
  let sent = 0;
  const timer = setInterval(() => {
    if (res.destroyed || res.stream?.destroyed) return clearInterval(timer); // HTTP/1.1 or HTTP/2
    res.write(chunk(model, { content: `w${sent} ` }));
    if (++sent === total) {
      clearInterval(timer);
      res.end(chunk(model, {}, 'stop') + 'data: [DONE]\n\n');
    }
  }, interval);
  res.on('close', () => clearInterval(timer));
}

function route(req, res) {
  const match = /^\/d(\d+)(\/.*)$/.exec(req.url ?? '');
  const delay = match ? Number(match[1]) : 0;
  const path = match ? match[2] : req.url;
  if (req.method === 'GET' && (path === '/v1/models' || path === '/models')) {
    req.resume();
    const json = JSON.stringify({ object: 'list', data: [{ id: `bench-d${delay}`, object: 'model', owned_by: 'bench', created: 1700000000 }] });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
    return res.end(json);
  }
  if (req.method !== 'POST' || !path.endsWith('/chat/completions')) {
    req.resume();
    res.writeHead(404, { 'content-type': 'application/json' });
    return res.end('{"error":{"message":"not found","type":"invalid_request_error"}}');
  }
  const parts = [];
  req.on('data', (c) => parts.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(parts).toString();
    if (delay > 0) setTimeout(answer, delay, req, res, delay, raw);
    else answer(req, res, delay, raw);
  });
}

const server = createServer(route);
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;
server.maxConnections = 30_000;
// HTTP/2's compatibility API hands `route` the same request and response methods.
const h2Server = createH2Server(route);
const tls = process.env.BENCH_UPSTREAM_TLS_KEY && process.env.BENCH_UPSTREAM_TLS_CERT;
const tlsServer = tls
  ? createSecureServer({ key: readFileSync(process.env.BENCH_UPSTREAM_TLS_KEY), cert: readFileSync(process.env.BENCH_UPSTREAM_TLS_CERT), allowHTTP1: true }, route)
  : null;
if (tlsServer) {
  // The HTTP/1.1 connections it accepts keep alive as the cleartext listener's do.
  tlsServer.keepAliveTimeout = 65_000;
  tlsServer.maxConnections = 30_000;
}
const listening = (s, port) => new Promise((resolve) => s.listen(port, '127.0.0.1', resolve));
await Promise.all([listening(server, Number(process.env.BENCH_UPSTREAM_PORT ?? 0)), listening(h2Server, 0), tlsServer && listening(tlsServer, 0)]);
const ports = { port: server.address().port, h2Port: h2Server.address().port, ...(tlsServer ? { tlsPort: tlsServer.address().port } : {}) };
process.stdout.write(`${JSON.stringify(ports)}\n`);
process.once('SIGTERM', () => process.exit(0));
