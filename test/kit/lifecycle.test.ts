import net from 'node:net';
import test from 'ava';
import { createInternalClient, createServiceApp, listen, parseSize, route, type UserDirectory, ApiError } from '../../services/kit/index.js';
import { createLogger } from '../../services/kit/logger.js';
import { listenBacklog, somaxconn } from '../helpers/listen-backlog.js';

const users: UserDirectory = { resolve: async (c) => ({ ...c, isAdmin: false, isGuest: false }), invalidate: () => {} };
const SECRET = 's'.repeat(40);

function streamingApp(onStarted: () => void, release: Promise<void>, readiness: Record<string, () => Promise<void>> = {}) {
  return createServiceApp({
    name: 'lifecycle-test',
    logger: createLogger({ level: 'silent', name: 't' }),
    gatewaySecret: SECRET,
    users,
    readiness,
    bodyLimit: parseSize('1mb'),
    routeTable: [
      route({
        method: 'get',
        path: '/stream',
        summary: 'a stream held open until released',
        access: 'user',
        handler: async ({ res }) => {
          res.setHeader('content-type', 'text/event-stream');
          res.write('data: first\n\n');
          onStarted();
          await release;
          res.end('data: [DONE]\n\n');
        },
      }),
      route({ method: 'get', path: '/whoami', summary: 'the caller', access: 'user', handler: ({ req, principal }) => ({ user: principal.userId, requestId: req.requestId }) }),
      route({ method: 'post', path: '/echo', summary: 'echo', access: 'user', handler: ({ body }) => body }),
      route({
        method: 'get',
        path: '/teapot',
        summary: 'always busy',
        access: 'user',
        handler: () => {
          throw new ApiError(409, 'busy');
        },
      }),
    ],
  });
}

test('close drains an in-flight stream to its end and refuses new connections', async (t) => {
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  let release!: () => void;
  const releaseP = new Promise<void>((r) => (release = r));
  const server = await listen(streamingApp(started, releaseP), { host: '127.0.0.1', port: 0 });
  const headers = { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': 'user_x' };
  const response = await fetch(`http://127.0.0.1:${server.port}/stream`, { headers });
  const bodyP = response.text();
  await startedP;
  const closing = server.close(10_000);
  await t.throwsAsync(fetch(`http://127.0.0.1:${server.port}/whoami`, { headers }));
  release();
  t.is(await bodyP, 'data: first\n\ndata: [DONE]\n\n');
  await closing;
});

test('the server listens with the backlog asked for (the kernel caps it), and with Node\'s 511 when none is', async (t) => {
  const asked = Math.min(1500, somaxconn());
  const withBacklog = await listen(streamingApp(() => {}, Promise.resolve()), { host: '127.0.0.1', port: 0, backlog: asked });
  const plain = await listen(streamingApp(() => {}, Promise.resolve()), { host: '127.0.0.1', port: 0 });
  t.teardown(() => Promise.all([withBacklog.close(100), plain.close(100)]));
  t.is(listenBacklog(withBacklog.port), asked);
  t.is(listenBacklog(plain.port), Math.min(511, somaxconn()));
});

/** Sends `raw` on a fresh connection and reads until the server closes it. */
function rawExchange(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(raw));
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('close', () => resolve(answer));
    socket.on('error', reject);
  });
}

test('a request Node cannot parse gets the platform error body with a request id, then the connection closes', async (t) => {
  const server = await listen(streamingApp(() => {}, Promise.resolve()), { host: '127.0.0.1', port: 0 });
  t.teardown(() => server.close(1000));
  const cases: Array<[string, number, string]> = [
    ['GET /whoami HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n', 400, 'invalid_parameter'],
    ['POST /whoami HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400, 'invalid_parameter'],
    [`GET /whoami HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'request_header_fields_too_large'],
  ];
  for (const [raw, status, code] of cases) {
    const answer = await rawExchange(server.port, raw);
    const [head, body] = answer.split('\r\n\r\n');
    t.regex(head!, new RegExp(`^HTTP/1\\.1 ${status} `));
    t.regex(head!, /\r\nConnection: close/);
    const requestId = /\r\nX-Request-ID: (\S+)/.exec(head!)?.[1];
    t.truthy(requestId);
    const parsed = JSON.parse(body!);
    t.like(parsed.error, { type: 'invalid_request_error', code, request_id: requestId });
  }
});

test('close cuts streams that outlive the drain timeout', async (t) => {
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const server = await listen(streamingApp(started, new Promise(() => {})), { host: '127.0.0.1', port: 0 });
  const headers = { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': 'user_x' };
  const response = await fetch(`http://127.0.0.1:${server.port}/stream`, { headers });
  const bodyP = response.text();
  await startedP;
  await server.close(50);
  await t.throwsAsync(bodyP);
});

test('readyz reports each dependency; metrics count requests by route and status', async (t) => {
  let dbUp = true;
  const app = streamingApp(() => {}, Promise.resolve(), {
    database: async () => {
      if (!dbUp) throw new Error('down');
    },
  });
  const server = await listen(app, { host: '127.0.0.1', port: 0 });
  const base = `http://127.0.0.1:${server.port}`;
  t.is((await fetch(`${base}/readyz`)).status, 200);
  dbUp = false;
  const notReady = await fetch(`${base}/readyz`);
  t.is(notReady.status, 503);
  t.deepEqual(((await notReady.json()) as { checks: unknown }).checks, { database: 'unavailable' });
  const headers = { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': 'user_x' };
  await fetch(`${base}/whoami`, { headers });
  await fetch(`${base}/teapot`, { headers });
  const metrics = await (await fetch(`${base}/metrics`)).text();
  t.regex(metrics, /http_requests_total\{method="GET",route="\/whoami",status="200",service="lifecycle-test"\} 1/);
  t.regex(metrics, /http_requests_total\{method="GET",route="\/teapot",status="409",service="lifecycle-test"\} 1/);
  t.regex(metrics, /http_request_duration_seconds_count\{service="lifecycle-test",method="GET",route="\/whoami",status="200"\} 1/);
  // The process's event-loop delay (what the benchmark reads under load).
  t.regex(metrics, /nodejs_eventloop_delay_seconds\{[^}]*quantile="0\.99"[^}]*\} [0-9.e-]+\n/);
  await server.close(100);
});

test('the internal client carries identity, gateway token and request id, and maps outages to 503', async (t) => {
  const server = await listen(streamingApp(() => {}, Promise.resolve()), { host: '127.0.0.1', port: 0 });
  const client = createInternalClient({ baseUrl: `http://127.0.0.1:${server.port}`, gatewayToken: SECRET, timeoutMs: 2000 });
  const principal = { userId: 'user_abc', subject: 'user_abc', email: null, username: null, authMethod: 'jwt' as const, isAdmin: false, isGuest: false };
  const who = await client.call<{ user: string; requestId: string }>('GET', '/whoami', { principal, requestId: 'rid-1' });
  t.is(who.status, 200);
  t.deepEqual(who.body, { user: 'user_abc', requestId: 'rid-1' });
  const echo = await client.call('POST', '/echo', { principal, body: { a: 1 } });
  t.deepEqual(echo.body, { a: 1 });
  const anonymous = await createInternalClient({ baseUrl: `http://127.0.0.1:${server.port}` }).call('GET', '/whoami', { principal });
  t.is(anonymous.status, 401, 'without the gateway token the service refuses');
  await server.close(100);
  await client.close();
  const down = createInternalClient({ baseUrl: `http://127.0.0.1:${server.port}`, timeoutMs: 500 });
  const error = await t.throwsAsync(down.call('GET', '/whoami'), { instanceOf: ApiError });
  t.is(error!.status, 503);
});
