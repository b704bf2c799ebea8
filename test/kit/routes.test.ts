import { request as httpRequest } from 'node:http';
import test from 'ava';
import express from 'express';
import { z } from 'zod';
import { ApiError, createLogger, createServiceApp, listen, mountRoutes, route, routeGroup, type Route, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import { listenKitApp } from '../helpers/kit-app.js';

// The route-table mount: access, body limits, validation and answers all come from each entry.
const users: UserDirectory = {
  resolve: async (claims) =>
    claims.userId === 'user_ghost' ? null : { ...claims, isAdmin: claims.userId === 'user_admin', isGuest: false },
  invalidate: () => {},
};
const SECRET = 'r'.repeat(40);
let server: RunningServer;
let base: string;
let aborted: (wasAborted: boolean) => void;
const abortSeen = new Promise<boolean>((resolve) => (aborted = resolve));

const routes: Route[] = [
  route({ method: 'get', path: '/v1/open', summary: 'public', access: 'public', handler: ({ principal }) => ({ user: principal?.userId ?? null }) }),
  route({ method: 'get', path: '/v1/mine', summary: 'user', access: 'user', handler: ({ principal }) => ({ user: principal.userId }) }),
  route({ method: 'get', path: '/v1/admin/things', summary: 'admin', access: 'admin', handler: () => ({ ok: true }) }),
  route({ method: 'post', path: '/internal/ping', summary: 'internal', access: 'internal', handler: ({ principal }) => ({ principal }) }),
  route({
    method: 'post',
    path: '/v1/small',
    summary: 'small body',
    access: 'user',
    bodyLimit: 64,
    request: { body: z.object({ text: z.string() }) },
    response: { status: 201 },
    handler: ({ body }) => ({ length: body.text.length }),
  }),
  route({
    method: 'post',
    path: '/v1/large',
    summary: 'large body',
    access: 'user',
    bodyLimit: 64 * 1024,
    request: { body: z.object({ text: z.string() }) },
    handler: ({ body }) => ({ length: body.text.length }),
  }),
  route({ method: 'post', path: '/v1/default', summary: 'default limit', access: 'user', handler: ({ body }) => ({ body }) }),
  route({
    method: 'post',
    path: '/v1/upload',
    summary: 'stream',
    access: 'user',
    body: 'stream',
    bodyLimit: 16,
    handler: async ({ req, body }) => {
      let size = 0;
      for await (const chunk of req) size += (chunk as Buffer).length;
      return { size, parsed: body !== undefined };
    },
  }),
  route({
    method: 'get',
    path: '/v1/things/:thingId',
    summary: 'validated params and query',
    access: 'user',
    request: {
      params: z.object({ thingId: z.string().regex(/^thing_\w+$/) }),
      query: z.object({ limit: z.coerce.number().int().max(10).optional() }),
    },
    handler: ({ params, query }) => ({ id: params.thingId, limit: query.limit ?? null }),
  }),
  // Declared after a template that matches it: Express answers with the earlier entry, so must the kit.
  route({ method: 'get', path: '/v1/things/special', summary: 'shadowed', access: 'user', handler: () => ({ special: true }) }),
  route({ method: 'delete', path: '/v1/things/:thingId', summary: 'no content', access: 'user', response: { status: 204 }, handler: () => undefined }),
  route({
    method: 'get',
    path: '/v1/slow',
    summary: 'waits for the client to leave',
    access: 'user',
    handler: ({ res, signal }) =>
      new Promise<void>((resolve) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': open\n\n');
        signal.addEventListener('abort', () => {
          aborted(signal.aborted);
          resolve();
        });
      }),
  }),
];

test.before(async () => {
  ({ server, base } = await listenKitApp({ name: 'routes-test', gatewaySecret: SECRET, users, routeTable: routes, aliases: ['/llm'] }));
});
test.after.always(() => server.close(100));

const as = (userId: string) => ({ 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': userId });
const anonymous = { 'x-gateway-token': SECRET };

async function call(path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) {
  const res = await fetch(base + path, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}
/** One request with Node's client: status, headers and the raw body bytes (HEAD included). */
function raw(url: string, method: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: import('node:http').IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function listenApp(app: express.Express) {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const port = (server.address() as import('node:net').AddressInfo).port;
  return { base: `http://127.0.0.1:${port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

const json = (headers: Record<string, string>, body: unknown) => ({
  method: 'POST',
  headers: { ...headers, 'content-type': 'application/json' },
  body: JSON.stringify(body),
});

test('a public route answers without identity, and sees the caller when one is sent', async (t) => {
  t.deepEqual((await call('/v1/open', { headers: anonymous })).body, { user: null });
  t.deepEqual((await call('/v1/open', { headers: as('user_1') })).body, { user: 'user_1' });
  // Identity headers that name no enabled user are refused even on a public route.
  t.is((await call('/v1/open', { headers: as('user_ghost') })).status, 401);
});

test('a user route needs identity (401 in shape A without it)', async (t) => {
  const denied = await call('/v1/mine', { headers: anonymous });
  t.is(denied.status, 401);
  t.like(denied.body.error, { type: 'auth_error', code: 'unauthorized' });
  t.deepEqual((await call('/v1/mine', { headers: as('user_1') })).body, { user: 'user_1' });
});

test('an admin route answers 403 to a non-admin, 401 to nobody and 200 to an admin', async (t) => {
  const denied = await call('/v1/admin/things', { headers: as('user_1') });
  t.is(denied.status, 403);
  t.like(denied.body.error, { type: 'permission_error', code: 'forbidden' });
  t.is((await call('/v1/admin/things', { headers: anonymous })).status, 401);
  t.is((await call('/v1/admin/things', { headers: as('user_admin') })).status, 200);
});

test('an internal route refuses requests carrying edge identity headers', async (t) => {
  t.deepEqual((await call('/internal/ping', { method: 'POST', headers: anonymous })).body, { principal: null });
  t.is((await call('/internal/ping', { method: 'POST', headers: as('user_admin') })).status, 403);
  const spoofed = await call('/internal/ping', { method: 'POST', headers: { ...anonymous, 'x-user-email': 'a@b.c' } });
  t.is(spoofed.status, 403);
  t.is(spoofed.body.error.type, 'permission_error');
  // Still behind the gateway token like everything else.
  t.is((await call('/internal/ping', { method: 'POST' })).status, 401);
});

test('an internal route must live under /internal/, and an /internal/ path must be marked internal', (t) => {
  const handler = () => null;
  t.throws(() => mountRoutes([{ method: 'get', path: '/v1/x', summary: 'x', access: 'internal', handler }], { users, bodyLimit: 1 }), { message: /internal/ });
  t.throws(() => mountRoutes([{ method: 'get', path: '/internal/x', summary: 'x', access: 'user', handler }], { users, bodyLimit: 1 }), { message: /internal/ });
  t.throws(
    () => mountRoutes([{ method: 'get', path: '/v1/x', summary: 'x', access: 'user', handler }, { method: 'get', path: '/v1/x', summary: 'y', access: 'user', handler }], { users, bodyLimit: 1 }),
    { message: /twice/ },
  );
});

test("a route group supplies its tag and access to every entry, an entry may override them, and an entry left without access is refused at mount", (t) => {
  const group = routeGroup({ tag: 'things', access: 'user' });
  const handler = () => null;
  t.like(group.get('/v1/things/:id', { summary: 'get', handler }), { method: 'get', path: '/v1/things/:id', tag: 'things', access: 'user' });
  t.like(group.delete('/v1/things/:id', { summary: 'delete', access: 'admin', tag: 'admin', handler }), { method: 'delete', access: 'admin', tag: 'admin' });
  const untagged = routeGroup({ tag: 'things' });
  t.throws(() => mountRoutes([untagged.post('/v1/things', { summary: 'create', handler })], { users, bodyLimit: 1 }), { message: /POST \/v1\/things needs an access/ });
  t.notThrows(() => mountRoutes([untagged.post('/v1/things', { summary: 'create', access: 'public', handler })], { users, bodyLimit: 1 }));
});

test('body limits are per route: the small route refuses what the large one accepts; the default applies otherwise', async (t) => {
  const text = 'x'.repeat(200);
  const small = await call('/v1/small', json(as('user_1'), { text }));
  t.is(small.status, 413);
  t.like(small.body.error, { code: 'payload_too_large', param: 'body' });
  t.deepEqual((await call('/v1/large', json(as('user_1'), { text }))).body, { length: 200 });
  t.is((await call('/v1/default', json(as('user_1'), { text: 'y'.repeat(2000) }))).status, 413);
  t.is((await call('/v1/default', json(as('user_1'), { text: 'y'.repeat(500) }))).status, 200);
});

test("a route's JSON answer is what Express's res.json sends: content type with charset, length, the same bytes; HEAD has the head only", async (t) => {
  const app = express();
  const payload = { user: null, text: 'héllo ✓', nested: { list: [1, 2.5, null, true] } };
  app.get('/x', (_req, res) => void res.json(payload));
  const viaExpress = await listenApp(app);
  const table = await listenKitApp({ name: 'routes-json', gatewaySecret: SECRET, users, routeTable: [route({ method: 'get', path: '/x', summary: 'json', access: 'public', handler: () => payload })] });
  try {
    for (const method of ['GET', 'HEAD']) {
      const [a, b] = await Promise.all([raw(`${viaExpress.base}/x`, method), raw(`${table.base}/x`, method, anonymous)]);
      t.is(b.status, a.status, method);
      t.is(b.headers['content-type'], a.headers['content-type'], method);
      t.is(b.headers['content-length'], a.headers['content-length'], method);
      t.deepEqual(b.body, a.body, method);
    }
    const get = await raw(`${table.base}/x`, 'GET', anonymous);
    t.is(get.headers['content-type'], 'application/json; charset=utf-8');
    t.is(Number(get.headers['content-length']), Buffer.byteLength(JSON.stringify(payload)));
  } finally {
    await table.server.close(100);
    await viaExpress.close();
  }
});

test('the response status comes from the entry, and 204 routes end without a body', async (t) => {
  const created = await call('/v1/small', json(as('user_1'), { text: 'hi' }));
  t.is(created.status, 201);
  t.deepEqual(created.body, { length: 2 });
  const deleted = await fetch(`${base}/v1/things/thing_1`, { method: 'DELETE', headers: as('user_1') });
  t.is(deleted.status, 204);
  t.is(await deleted.text(), '');
});

test('a stream route leaves the body unread, whatever its content type, and ignores the JSON limit', async (t) => {
  const res = await call('/v1/upload', {
    method: 'POST',
    headers: { ...as('user_1'), 'content-type': 'multipart/form-data; boundary=x' },
    body: 'z'.repeat(300),
  });
  t.is(res.status, 200);
  t.deepEqual(res.body, { size: 300, parsed: false });
});

test('body, query and params are validated, with param naming the field', async (t) => {
  const missing = await call('/v1/small', json(as('user_1'), {}));
  t.is(missing.status, 400);
  t.like(missing.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'text' });
  const badParam = await call('/v1/things/nope', { headers: as('user_1') });
  t.is(badParam.status, 400);
  t.is(badParam.body.error.param, 'thingId');
  const badQuery = await call('/v1/things/thing_1?limit=99', { headers: as('user_1') });
  t.is(badQuery.status, 400);
  t.is(badQuery.body.error.param, 'limit');
  t.deepEqual((await call('/v1/things/thing_1?limit=3', { headers: as('user_1') })).body, { id: 'thing_1', limit: 3 });
});

test('every route answers under its /llm alias too', async (t) => {
  t.deepEqual((await call('/llm/v1/things/thing_2', { headers: as('user_1') })).body, { id: 'thing_2', limit: null });
  t.is((await call('/llm/v1/small', json(as('user_1'), { text: 'x'.repeat(200) }))).status, 413);
});

test('the first entry that matches a path answers it, as in Express: a fixed path declared after a matching template is that template\'s', async (t) => {
  const res = await call('/v1/things/special', { headers: as('user_1') });
  t.is(res.status, 400);
  t.like(res.body.error, { param: 'thingId' });
  t.is((await call('/llm/v1/things/special', { headers: as('user_1') })).status, 400, 'under the alias too');
  // HEAD on a fixed GET path is Express's own (the GET entry without a body).
  const head = await fetch(`${base}/v1/mine`, { method: 'HEAD', headers: as('user_1') });
  t.is(head.status, 200);
  t.is(await head.text(), '');
});

test('case and trailing-slash variants of a path are 404, not the route', async (t) => {
  for (const path of ['/v1/Mine', '/v1/mine/', '/V1/mine', '/LLM/v1/mine', '/llm/v1/mine/', '/v1/things/thing_1/']) {
    const res = await call(path, { headers: as('user_1') });
    t.is(res.status, 404, path);
    t.like(res.body.error, { type: 'not_found_error', code: 'not_found' });
  }
});

test('an unknown route is 404 before any body or identity check (a multipart POST is not a 415)', async (t) => {
  const res = await call('/v1/nowhere', {
    method: 'POST',
    headers: { ...anonymous, 'content-type': 'multipart/form-data; boundary=x' },
    body: '--x--',
  });
  t.is(res.status, 404);
});

test('a method the path does not declare is a 405 naming the allowed ones, before identity or body', async (t) => {
  const res = await call('/v1/mine', { method: 'PUT', headers: { ...anonymous, 'content-type': 'text/plain' }, body: 'x' });
  t.is(res.status, 405);
  t.is(res.headers.get('allow'), 'GET, HEAD');
  t.like(res.body.error, { type: 'invalid_request_error', code: 'method_not_allowed' });
  t.is((await call('/llm/v1/mine', { method: 'DELETE', headers: as('user_1') })).status, 405, 'under the alias too');
});

test('the handler signal aborts when the client goes away mid-answer', async (t) => {
  await new Promise<void>((resolve, reject) => {
    const req = httpRequest(`${base}/v1/slow`, { headers: as('user_1') }, (res) => {
      res.once('data', () => {
        req.destroy();
        resolve();
      });
    });
    req.on('error', (error) => ((error as NodeJS.ErrnoException).code === 'ECONNRESET' ? undefined : reject(error)));
    req.end();
  });
  t.true(await abortSeen);
});

test('metrics label requests by path template, one series for a path and its alias', async (t) => {
  await call('/v1/things/thing_a', { headers: as('user_1') });
  await call('/llm/v1/things/thing_b', { headers: as('user_1') });
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('http_requests_total{') && l.includes('route="/v1/things/:thingId"') && l.includes('status="200"'));
  t.truthy(line);
  t.true(Number(line!.split(' ').pop()) >= 2);
  t.false(/route="[^"]*(\\\/|\^|\$)/.test(text), 'no raw regex in a route label');
  t.false(text.includes('thing_a'));
});

test('a parameter-free route answers exactly as through Express: identity, token, body, validation, errors, access log', async (t) => {
  // The served app dispatches parameter-free paths itself; mounted inside another Express app
  // (a callback is given) every request takes Express's router. Both must answer alike.
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'info', name: 'direct-test' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const table: Route[] = [
    ...routes,
    route({ method: 'post', path: '/v1/fails', summary: 'throws', access: 'user', handler: () => { throw new ApiError(409, 'Already there', { param: 'name' }); } }),
    route({ method: 'post', path: '/v1/crashes', summary: 'throws a bug', access: 'user', handler: () => { throw new Error('internal detail'); } }),
  ];
  const app = createServiceApp({ name: 'direct-test', logger, gatewaySecret: SECRET, users, routeTable: table, aliases: ['/llm'], bodyLimit: 1024 });
  const outer = express();
  outer.use(app);
  const direct = await listen(app, { host: '127.0.0.1', port: 0 });
  const viaExpress = await listen(outer, { host: '127.0.0.1', port: 0 });
  t.teardown(() => Promise.all([direct.close(100), viaExpress.close(100)]));

  const cases: Array<[string, { method?: string; headers?: Record<string, string>; body?: string }]> = [
    ['/v1/mine', { headers: as('user_1') }],
    ['/llm/v1/mine?x=1', { headers: as('user_1') }],
    ['/v1/mine', { headers: anonymous }],
    ['/v1/mine', { headers: as('user_ghost') }],
    ['/v1/mine', { headers: { ...as('user_1'), 'x-gateway-token': 'wrong' } }],
    ['/v1/admin/things', { headers: as('user_1') }],
    ['/v1/small', json(as('user_1'), { text: 'hi' })],
    ['/v1/small', json(as('user_1'), { text: 7 })],
    ['/v1/small', json(as('user_1'), { text: 'x'.repeat(100) })],
    ['/v1/small', { method: 'POST', headers: { ...as('user_1'), 'content-type': 'application/json' }, body: '{"text":' }],
    ['/v1/fails', json(as('user_1'), {})],
    ['/v1/crashes', json(as('user_1'), {})],
    ['/internal/ping', json({ ...as('user_1') }, {})],
  ];
  let sent = 0;
  for (const [path, init] of cases) {
    const answers = [];
    for (const origin of [`http://127.0.0.1:${direct.port}`, `http://127.0.0.1:${viaExpress.port}`]) {
      const requestId = `req_${answers.length}_${++sent}`;
      const res = await fetch(origin + path, { ...init, headers: { ...init.headers, 'x-request-id': requestId } });
      const body = (await res.json()) as { error?: { request_id?: string } };
      t.is(res.headers.get('x-request-id'), requestId, path);
      if (body.error) body.error.request_id = body.error.request_id === requestId ? 'the request id' : body.error.request_id;
      answers.push({ status: res.status, type: res.headers.get('content-type'), body });
      t.is(lines.filter((line) => line.request_id === requestId && line.msg === 'request').length, 1, `one access line for ${path}`);
    }
    t.deepEqual(answers[0], answers[1], `${init.method ?? 'GET'} ${path}`);
  }
  // The refused and failed requests were answered by the app's error handler on both ways.
  const crashed = lines.filter((line) => line.msg === 'unhandled error').map((line) => line.request_id);
  t.deepEqual(crashed, ['req_0_23', 'req_1_24']);
});
