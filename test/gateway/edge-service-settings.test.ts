import test from 'ava';
import { once } from 'node:events';
import http, { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEdge } from '../../services/gateway/edge.js';
import { parseDeck } from '../../services/gateway/deck.js';
import { ManualClock } from '../../services/kit/clock.js';
import { serviceHttpObjects } from '../../services/kit/http/index.js';
import { createInProcessRevocations } from '../../services/kit/revocations.js';
import { silentLogger } from '../../plugins/core/index.js';
import { listenOn, startFakeUpstream } from '../plugins/fakes.js';

// What a deck says of a route's Host (`preserve_host`) and of a service's timeouts
// (`connect_timeout`, `read_timeout`, `write_timeout`, ms as decK defines them) is what the embedded
// edge does, as Kong does. The edge is built without timeouts of its own (EDGE_UPSTREAM_* unset),
// so each service's deck values are the ones in force.
let upstream: Awaited<ReturnType<typeof startFakeUpstream>>;
let silent: Awaited<ReturnType<typeof listenOn>>;
let stalled: Awaited<ReturnType<typeof listenOn>>;
let edge: Awaited<ReturnType<typeof createEdge>>;
let server: Server;
let port: number;
const LOCAL_ORIGIN = 'http://127.0.0.1:1';
const bodies: IncomingMessage[] = [];

test.before(async () => {
  upstream = await startFakeUpstream();
  // Reads the whole request, never answers.
  silent = await listenOn((req) => req.resume());
  // Never reads the request body: a large one stalls in the socket buffers.
  stalled = await listenOn((req) => void bodies.push(req.pause()));
  const deck = parseDeck(
    `
_format_version: "3.0"
services:
  - name: echo
    url: ${upstream.url}
    routes:
      - { name: kept, paths: ['~/kept(/|$)'], preserve_host: true, strip_path: false }
      - { name: plain, paths: ['~/plain(/|$)'], strip_path: false }
  - name: silent
    url: ${silent.url}
    read_timeout: 50
    write_timeout: 600000
    routes:
      - { name: silent, paths: ['~/silent(/|$)'] }
  - name: stalled
    url: ${stalled.url}
    write_timeout: 50
    read_timeout: 600000
    routes:
      - { name: stalled, paths: ['~/stalled(/|$)'] }
  - name: local
    url: ${LOCAL_ORIGIN}
    read_timeout: 50
    routes:
      - { name: local, paths: ['~/local(/|$)'] }
`,
    {},
  );
  edge = await createEdge({
    deck,
    deps: { clock: new ManualClock(Date.UTC(2026, 11, 7, 12, 0, 1)), logger: silentLogger, revocations: createInProcessRevocations() },
    trustedProxies: [],
    // A service in this process that never answers.
    inProcess: (origin) => (origin === LOCAL_ORIGIN ? () => {} : undefined),
  });
  server = createServer(serviceHttpObjects, (req, res) => edge.handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

test.after.always(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  for (const req of bodies) req.destroy();
  await edge?.close();
  await Promise.all([upstream?.close(), silent?.close(), stalled?.close()]);
});

const get = async (path: string, host: string) => {
  const req = http.request({ host: '127.0.0.1', port, path, headers: { host, connection: 'close' } });
  req.end();
  const [res] = (await once(req, 'response')) as [IncomingMessage];
  let text = '';
  for await (const chunk of res) text += chunk;
  return { status: res.statusCode!, body: JSON.parse(text) as { headers?: Record<string, string>; error?: { code: string } } };
};

test('preserve_host: the route sends the client\'s Host to the service; without it the service gets its own', async (t) => {
  const kept = await get('/kept/x', 'api.example');
  t.is(kept.status, 200);
  t.is(kept.body.headers?.host, 'api.example');
  const plain = await get('/plain/x', 'api.example');
  t.is(plain.body.headers?.host, new URL(upstream.url).host);
});

test("read_timeout: a service that never answers gets the 504 at its own deck read timeout", async (t) => {
  const answer = await get('/silent', 'api.example');
  t.is(answer.status, 504);
});

test('read_timeout also bounds a service dispatched in process that never answers', async (t) => {
  const answer = await get('/local', 'api.example');
  t.is(answer.status, 504);
});

test('write_timeout: a service that stops taking the request body gets the 504 at its deck write timeout', async (t) => {
  const req = http.request({ host: '127.0.0.1', port, path: '/stalled', method: 'POST', headers: { 'content-type': 'application/octet-stream', 'transfer-encoding': 'chunked' } });
  req.on('error', () => {});
  const chunk = Buffer.alloc(1 << 20, 120);
  let answered = false;
  const response = once(req, 'response').then(([res]) => {
    answered = true;
    return res as IncomingMessage;
  });
  // Sends until the edge answers: the stalled service takes the first megabytes into its socket
  // buffers, then nothing, so the edge's writes to it stop and its write timeout fires.
  void (async () => {
    while (!answered && !req.destroyed) if (!req.write(chunk)) await Promise.race([once(req, 'drain'), response]);
  })();
  const res = await response;
  t.is(res.statusCode, 504);
  req.destroy();
});
