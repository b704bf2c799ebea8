import test from 'ava';
import { z } from 'zod';
import { gzipSync } from 'node:zlib';
import { ApiError, BusUnavailableError, createLogger, isDependencyUnavailable, pageQuery, plannedRoute, route, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import { listenKitApp } from '../helpers/kit-app.js';
import { waitFor } from '../helpers/wait.js';

// An app built from the kit with a few routes that exercise every error class.
const users: UserDirectory = {
  resolve: async (claims) => ({ ...claims, isAdmin: false, isGuest: false }),
  invalidate: () => {},
};
let server: RunningServer;
let base: string;
const SECRET = 'x'.repeat(40);

test.before(async () => {
  ({ server, base } = await listenKitApp({
    name: 'errors-test',
    gatewaySecret: SECRET,
    users,
    routeTable: [
      route({
        method: 'post',
        path: '/echo',
        summary: 'validated echo',
        access: 'user',
        request: { body: z.object({ name: z.string().max(5), items: z.array(z.object({ type: z.enum(['a', 'b']) })).optional() }) },
        handler: ({ body }) => body,
      }),
      route({ method: 'post', path: '/big', summary: 'large body', access: 'user', bodyLimit: 64 * 1024, handler: ({ body }) => ({ size: JSON.stringify(body).length }) }),
      route({ method: 'get', path: '/public', summary: 'public', access: 'public', handler: () => ({ ok: true }) }),
      route({ method: 'get', path: '/boom', summary: 'throws', access: 'user', handler: () => {
        throw new Error('secret internal detail at /srv/app.ts:42');
      } }),
      route({ method: 'post', path: '/send', summary: 'sends on a bus that is away', access: 'user', handler: () => {
        throw new BusUnavailableError();
      } }),
      route({ method: 'get', path: '/async-boom', summary: 'rejects', access: 'user', handler: async () => {
        await Promise.resolve();
        throw new TypeError('cannot read x of undefined');
      } }),
      // A rejection without a reason (`Promise.reject()`, `throw undefined`), on the direct way and through Express.
      route({ method: 'get', path: '/reasonless', summary: 'rejects with nothing', access: 'user', handler: () => Promise.reject() }),
      route({ method: 'get', path: '/reasonless/:id', summary: 'throws undefined', access: 'user', handler: async () => {
        await Promise.resolve();
        throw undefined;
      } }),
      route({ method: 'get', path: '/forbidden', summary: '403', access: 'user', handler: () => {
        throw new ApiError(403, 'nope');
      } }),
      route({ method: 'get', path: '/model', summary: '404 model', access: 'user', handler: () => {
        throw new ApiError(404, 'The model x does not exist', { code: 'model_not_found', param: 'model' });
      } }),
      route({ method: 'get', path: '/wait/:seconds', summary: '429 with a wait', access: 'user', handler: ({ params }) => {
        throw new ApiError(429, 'wait', { headers: { 'retry-after': (params as { seconds: string }).seconds } });
      } }),
      route({ method: 'get', path: '/conflict', summary: '409', access: 'user', handler: () => {
        throw new ApiError(409, 'taken', { param: 'name' });
      } }),
      route({ method: 'get', path: '/retry-anyway', summary: '409 the thrower wants retried', access: 'user', handler: () => {
        throw new ApiError(409, 'busy', { headers: { 'x-should-retry': 'true' } });
      } }),
      plannedRoute({ method: 'get', path: '/planned', summary: 'not built' }),
      route({ method: 'get', path: '/offset-list', summary: 'offset paged', access: 'user', request: { query: pageQuery() }, handler: ({ query }) => query }),
      route({ method: 'get', path: '/cursor-list', summary: 'cursor paged', access: 'user', request: { query: pageQuery().extend({ after: z.string().optional() }) }, handler: ({ query }) => query }),
      route({ method: 'post', path: '/union', summary: 'unions', access: 'user', request: { body: z.object({ stop: z.union([z.string(), z.array(z.string())]).optional(), input: z.union([z.string(), z.array(z.object({ type: z.string() }))]).optional() }) }, handler: ({ body }) => body }),
      route({ method: 'post', path: '/strict', summary: 'strict body', access: 'user', request: { body: z.object({ name: z.string(), nested: z.object({ a: z.number() }).strict().optional() }).strict() }, handler: ({ body }) => body }),
    ],
  }));
});
test.after.always(() => server.close(100));

const auth = { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': 'user_test' };

async function call(path: string, init: RequestInit & { headers?: Record<string, string> } = {}) {
  const res = await fetch(base + path, { ...init, headers: { ...auth, ...init.headers } });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text), requestId: res.headers.get('x-request-id') };
}

function assertShapeA(t: import('ava').ExecutionContext, body: any, expected: { type: string; code: string; param?: string | null }) {
  t.deepEqual(Object.keys(body), ['error']);
  t.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'request_id', 'type']);
  t.is(body.error.type, expected.type);
  t.is(body.error.code, expected.code);
  if (expected.param !== undefined) t.is(body.error.param, expected.param);
  t.is(typeof body.error.message, 'string');
  t.true(body.error.message.length > 0);
}

test('malformed JSON is a 400 naming the body', async (t) => {
  const r = await call('/echo', { method: 'POST', body: '{"name": ', headers: { 'content-type': 'application/json' } });
  t.is(r.status, 400);
  assertShapeA(t, r.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'body' });
  t.regex(r.body.error.message, /Malformed JSON/);
  t.is(r.body.error.request_id, r.requestId);
});

test('a body that is not valid UTF-8 is a 400 naming the body, never decoded with replacement characters', async (t) => {
  const json = (head: string, bytes: number[], tail = '"}') => Buffer.concat([Buffer.from(head), Buffer.from(bytes), Buffer.from(tail)]);
  const bad = [
    ['a byte that starts nothing', '/echo', json('{"name":"ab', [0xff])],
    ['a sequence cut short', '/echo', json('{"name":"a', [0xc3])],
    ['an encoded surrogate', '/echo', json('{"name":"a', [0xed, 0xa0, 0x80])],
    ['an overlong encoding', '/echo', json('{"name":"a', [0xc0, 0xaf])],
    ['only whitespace around it', '/echo', Buffer.from([0x20, 0xff, 0x20])],
    ['large and not ASCII', '/big', json(`{"name":"${'é'.repeat(6000)}`, [0xf0, 0x9f])],
    ['large and otherwise ASCII', '/big', json(`{"name":"${'x'.repeat(20000)}`, [0x80])],
  ] as const;
  for (const [label, path, body] of bad) {
    const r = await call(path, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    t.is(r.status, 400, label);
    assertShapeA(t, r.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'body' });
    t.is(r.body.error.message, 'The request body is not valid UTF-8', label);
  }
  // Valid text, small and large, ASCII or not, is read as it was sent.
  for (const name of ['é✓', 'Ça marche — ✓ 😀'.repeat(1000), 'x'.repeat(20000)]) {
    const r = await call('/big', { method: 'POST', body: Buffer.from(JSON.stringify({ name })), headers: { 'content-type': 'application/json' } });
    t.is(r.status, 200);
    t.is(r.body.size, JSON.stringify({ name }).length);
  }
});

test('a body over the route limit is a 413, and a larger per-route limit is honoured', async (t) => {
  const big = JSON.stringify({ name: 'x'.repeat(2000) });
  const r = await call('/echo', { method: 'POST', body: big, headers: { 'content-type': 'application/json' } });
  t.is(r.status, 413);
  assertShapeA(t, r.body, { type: 'invalid_request_error', code: 'payload_too_large', param: 'body' });
  const ok = await call('/big', { method: 'POST', body: big, headers: { 'content-type': 'application/json' } });
  t.is(ok.status, 200);
  t.is(ok.body.size, big.length);
});

test('a chunked body over the limit (no Content-Length) is a 413 too', async (t) => {
  const stream = new ReadableStream({
    start(controller) {
      for (let i = 0; i < 10; i++) controller.enqueue(new TextEncoder().encode('x'.repeat(200)));
      controller.close();
    },
  });
  const r = await call('/echo', { method: 'POST', body: stream, headers: { 'content-type': 'application/json' }, duplex: 'half' } as RequestInit & { headers: Record<string, string> });
  t.is(r.status, 413);
  t.is(r.body.error.code, 'payload_too_large');
});

test('a wrong content type is a 415', async (t) => {
  const r = await call('/echo', { method: 'POST', body: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  t.is(r.status, 415);
  assertShapeA(t, r.body, { type: 'invalid_request_error', code: 'unsupported_media_type', param: 'Content-Type' });
});

test('a compressed body is a 415 naming Content-Encoding; identity is a plain body', async (t) => {
  const body = gzipSync(JSON.stringify({ name: 'x' }));
  const r = await call('/echo', { method: 'POST', body, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } });
  t.is(r.status, 415);
  assertShapeA(t, r.body, { type: 'invalid_request_error', code: 'unsupported_media_type', param: 'Content-Encoding' });
  t.regex(r.body.error.message, /gzip/);
  const plain = await call('/echo', { method: 'POST', body: '{"name":"x"}', headers: { 'content-type': 'application/json', 'content-encoding': 'Identity' } });
  t.is(plain.status, 200);
});

test('an unknown route is a 404', async (t) => {
  const r = await call('/nowhere');
  t.is(r.status, 404);
  assertShapeA(t, r.body, { type: 'not_found_error', code: 'not_found', param: null });
});

test('schema violations name the offending field in param', async (t) => {
  const missing = await call('/echo', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  t.is(missing.status, 400);
  assertShapeA(t, missing.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'name' });
  t.regex(missing.body.error.message, /Missing required parameter/);
  // A value of the wrong type is there: it is named as such, not as missing (top level and nested).
  const wrongType = await call('/echo', { method: 'POST', body: '{"name":3}', headers: { 'content-type': 'application/json' } });
  assertShapeA(t, wrongType.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'name' });
  t.regex(wrongType.body.error.message, /^Invalid type for 'name'/);
  const wrongNested = await call('/echo', { method: 'POST', body: '{"name":"a","items":[{"type":"a"},7]}', headers: { 'content-type': 'application/json' } });
  assertShapeA(t, wrongNested.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'items[1]' });
  t.regex(wrongNested.body.error.message, /^Invalid type for 'items\[1\]'/);
  // A value no branch of a union takes is told by the branch that got furthest, or by the kinds the branches take.
  const union = (body: string) => call('/union', { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  const stop = await union('{"stop":[1,2]}');
  assertShapeA(t, stop.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'stop[0]' });
  t.regex(stop.body.error.message, /^Invalid type for 'stop\[0\]'/);
  const input = await union('{"input":5}');
  assertShapeA(t, input.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'input' });
  t.is(input.body.error.message, "Invalid type for 'input': expected string or array.");
  const deep = await union('{"input":[{"type":3}]}');
  assertShapeA(t, deep.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'input[0].type' });
  // An unknown field of a strict schema is named itself, not the object that holds it.
  const unknown = await call('/strict', { method: 'POST', body: '{"name":"a","junk":1}', headers: { 'content-type': 'application/json' } });
  assertShapeA(t, unknown.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'junk' });
  t.regex(unknown.body.error.message, /^Unrecognized parameter\(s\) in the request body: junk/);
  const unknownNested = await call('/strict', { method: 'POST', body: '{"name":"a","nested":{"a":1,"b":2}}', headers: { 'content-type': 'application/json' } });
  assertShapeA(t, unknownNested.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'nested.b' });
  t.regex(unknownNested.body.error.message, /^Unrecognized parameter\(s\) in 'nested': b/);
  const nested = await call('/echo', {
    method: 'POST',
    body: JSON.stringify({ name: 'ok', items: [{ type: 'a' }, { type: 'z' }] }),
    headers: { 'content-type': 'application/json' },
  });
  t.is(nested.status, 400);
  t.is(nested.body.error.param, 'items[1].type');
});

test('an unexpected throw is a 500 server_error without internals', async (t) => {
  for (const path of ['/boom', '/async-boom']) {
    const r = await call(path);
    t.is(r.status, 500);
    assertShapeA(t, r.body, { type: 'internal_error', code: 'server_error', param: null });
    t.false(JSON.stringify(r.body).includes('/srv/app.ts'));
    t.false(JSON.stringify(r.body).includes('undefined'));
    t.is(r.body.error.request_id, r.requestId);
  }
});

test('a handler failing without an error is a 500, not a 404 or 405 for a route that exists', async (t) => {
  for (const path of ['/reasonless', '/reasonless/1']) {
    const r = await call(path);
    t.is(r.status, 500, path);
    assertShapeA(t, r.body, { type: 'internal_error', code: 'server_error', param: null });
    t.is(r.body.error.request_id, r.requestId);
  }
});

test('ApiError keeps its status, type and code overrides', async (t) => {
  const f = await call('/forbidden');
  t.is(f.status, 403);
  assertShapeA(t, f.body, { type: 'permission_error', code: 'forbidden' });
  const m = await call('/model');
  t.is(m.status, 404);
  assertShapeA(t, m.body, { type: 'not_found_error', code: 'model_not_found', param: 'model' });
});

test('answers a retry cannot change soon say x-should-retry: false (a wait over a minute, 409, 501); others leave the SDK its retries', async (t) => {
  const advice = async (path: string) => {
    const res = await fetch(base + path, { headers: auth });
    await res.arrayBuffer();
    return { status: res.status, retry: res.headers.get('x-should-retry'), after: res.headers.get('retry-after') };
  };
  t.deepEqual(await advice('/wait/60'), { status: 429, retry: null, after: '60' });
  t.deepEqual(await advice('/wait/61'), { status: 429, retry: 'false', after: '61' });
  t.deepEqual(await advice('/wait/2215221'), { status: 429, retry: 'false', after: '2215221' });
  t.deepEqual(await advice('/conflict'), { status: 409, retry: 'false', after: null });
  t.deepEqual(await advice('/retry-anyway'), { status: 409, retry: 'true', after: null });
  t.deepEqual(await advice('/planned'), { status: 501, retry: 'false', after: null });
  t.deepEqual(await advice('/forbidden'), { status: 403, retry: null, after: null });
});

test('a list paged by offset refuses cursors (naming them) instead of serving page one again; a list that takes after keeps it', async (t) => {
  for (const key of ['after', 'before']) {
    const refused = await call(`/offset-list?limit=2&${key}=item_9`);
    t.is(refused.status, 400);
    assertShapeA(t, refused.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: key });
  }
  t.deepEqual((await call('/offset-list?limit=2&offset=4')).body, { limit: 2, offset: 4 });
  const cursor = await call('/cursor-list?limit=2&after=item_9');
  t.is(cursor.status, 200);
  t.is(cursor.body.after, 'item_9');
  t.is((await call('/cursor-list?before=item_9')).body.error.param, 'before');
});

test('a list paged by the after cursor refuses before with a message naming after, not "limit and offset" alone', async (t) => {
  const refused = await call('/cursor-list?limit=2&before=item_9');
  t.is(refused.status, 400);
  assertShapeA(t, refused.body, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'before' });
  t.regex(refused.body.error.message, /pages by the `after` cursor/);
  t.regex((await call('/offset-list?limit=2&before=item_9')).body.error.message, /^This list pages by limit and offset;/);
});

test('missing gateway token is 401; missing identity is 401 except on public routes', async (t) => {
  const noToken = await fetch(`${base}/public`);
  t.is(noToken.status, 401);
  const body = await noToken.json();
  assertShapeA(t, body, { type: 'auth_error', code: 'unauthorized', param: 'X-Gateway-Token' });
  const wrongToken = await fetch(`${base}/public`, { headers: { 'x-gateway-token': 'y'.repeat(40) } });
  t.is(wrongToken.status, 401);
  const anon = await fetch(`${base}/forbidden`, { headers: { 'x-gateway-token': SECRET } });
  t.is(anon.status, 401);
  const pub = await fetch(`${base}/public`, { headers: { 'x-gateway-token': SECRET } });
  t.is(pub.status, 200);
});

test('X-Request-ID is taken from the request when sane, generated otherwise, and echoed', async (t) => {
  const given = await fetch(`${base}/public`, { headers: { ...auth, 'x-request-id': 'req-123' } });
  t.is(given.headers.get('x-request-id'), 'req-123');
  const insane = await fetch(`${base}/public`, { headers: { ...auth, 'x-request-id': 'bad id with spaces' } });
  t.not(insane.headers.get('x-request-id'), 'bad id with spaces');
  t.regex(insane.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  const probe = await fetch(`${base}/healthz`);
  t.is(probe.status, 200);
  t.truthy(probe.headers.get('x-request-id'));
});

test('dependency outages (network errors, PostgreSQL connection states, pool timeouts) are told apart from bugs', (t) => {
  const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });
  t.true(isDependencyUnavailable(withCode('select 1 - read ECONNRESET', 'ECONNRESET')));
  t.true(isDependencyUnavailable(withCode('terminating connection due to administrator command', '57P01')));
  t.true(isDependencyUnavailable(withCode('connection failure', '08006')));
  t.true(isDependencyUnavailable(withCode('canceling statement due to statement timeout', '57014')));
  t.true(isDependencyUnavailable(new Error('select 1 - Query read timeout')));
  t.true(isDependencyUnavailable(new Error('timeout expired')));
  t.true(isDependencyUnavailable(new Error('ROLLBACK - Client has encountered a connection error and is not queryable')));
  t.true(isDependencyUnavailable(Object.assign(new Error('Knex: Timeout acquiring a connection. The pool is probably full.'), { name: 'KnexTimeoutError' })));
  t.true(isDependencyUnavailable(new Error('wrapped', { cause: withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED') })));
  t.false(isDependencyUnavailable(new TypeError("Cannot read properties of undefined (reading 'id')")));
  t.false(isDependencyUnavailable(withCode('duplicate key value violates unique constraint', '23505')));
  t.false(isDependencyUnavailable(undefined));
});

test('a send on a bus whose broker is away is a retryable 503, not a 500', async (t) => {
  const res = await call('/send', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  t.is(res.status, 503);
  t.regex(res.body.error.message, /temporarily unavailable/);
  t.true(isDependencyUnavailable(new Error('publish failed', { cause: new BusUnavailableError() })), 'also as the cause of another error');
});

test('an ApiError with headers thrown after a stream started is logged and the stream cut, on the direct and the Express way', async (t) => {
  // Its head is sent: the error's headers (retry-after, x-should-retry) can no longer be set, and
  // trying to set them threw inside the error handler, before the 5xx was logged.
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'info', name: 'late-errors' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const late = (message: string) => async ({ res }: { res: import('express').Response }) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"n":1}\n\n');
    await Promise.resolve();
    throw new ApiError(503, message, { headers: { 'retry-after': '5' } });
  };
  const app = await listenKitApp({
    name: 'late-errors',
    logger,
    users,
    routeTable: [
      route({ method: 'get', path: '/late', summary: 'direct dispatch', access: 'public', handler: late('late on the direct way') }),
      route({ method: 'get', path: '/late/:n', summary: 'through Express', access: 'public', handler: late('late through Express') }),
    ],
  });
  t.teardown(() => app.server.close(100));
  for (const [path, message] of [['/late', 'late on the direct way'], ['/late/1', 'late through Express']] as const) {
    const requestId = `late_${path.length}`;
    // The stream cannot turn into an error answer: it is cut, so the client sees a broken stream.
    await t.throwsAsync(fetch(app.base + path, { headers: { 'x-request-id': requestId } }).then((res) => res.text()), undefined, path);
    const logged = await waitFor(() => lines.find((line) => line.request_id === requestId && line.msg === message), 5_000, `the error line of ${path}`);
    t.is(logged.level, 50);
    t.false(lines.some((line) => JSON.stringify(line).includes('ERR_HTTP_HEADERS_SENT')), path);
  }
});
