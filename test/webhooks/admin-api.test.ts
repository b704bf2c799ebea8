import test from 'ava';
import { createTestUser, edgeHeaders } from '../helpers/users.js';
import { receiverAndStack, waitFor, type Receiver, type Stack } from './helpers.js';

// The admin API of webhook subscriptions, and the server-side request forgery guard: this stack
// runs WITHOUT EGRESS_ALLOW_HOSTS, so loopback and private targets are refused.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { env: { EGRESS_ALLOW_HOSTS: undefined } } }, (r, s) => {
  receiver = r;
  stack = s;
});

// A name that never resolves (RFC 2606 `.invalid`): accepted at registration (it may resolve later),
// and nothing is ever sent anywhere by these tests.
const PUBLIC_URL = 'https://hooks.example.invalid/hooks/a';

test('create returns the webhook with its secret once; get, list and patch never return it', async (t) => {
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: PUBLIC_URL, events: ['conversation.*', 'message.sent', 'message.sent'], headers: { 'X-Team': 'a' } });
  t.is(created.status, 201);
  const w = created.body;
  t.regex(w.id, /^wh_[0-9A-Za-z]{24}$/);
  t.is(w.object, 'webhook');
  t.is(w.url, PUBLIC_URL);
  t.deepEqual(w.events, ['conversation.*', 'message.sent']);
  t.is(w.active, true);
  // Header values are write-only: names only, each value the marker.
  t.deepEqual(w.headers, { 'X-Team': '[redacted]' });
  t.is(typeof w.created_at, 'number');
  t.is(typeof w.updated_at, 'number');
  t.regex(w.secret, /^whsec_[0-9A-Za-z]{32,}$/);

  const got = await stack.api('GET', `/v1/admin/webhooks/${w.id}`);
  t.is(got.status, 200);
  t.is(got.body.secret, undefined);
  t.is(got.body.id, w.id);

  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${w.id}`, { active: false, events: ['*'] });
  t.is(patched.status, 200);
  t.like(patched.body, { active: false, events: ['*'], url: PUBLIC_URL });
  t.is(patched.body.secret, undefined);

  const list = await stack.api('GET', '/v1/admin/webhooks?limit=100');
  t.is(list.status, 200);
  t.is(list.body.object, 'list');
  t.true(list.body.data.some((x: any) => x.id === w.id));
  t.false(JSON.stringify(list.body).includes(w.secret));

  t.is((await stack.api('DELETE', `/v1/admin/webhooks/${w.id}`)).status, 204);
  t.is((await stack.api('GET', `/v1/admin/webhooks/${w.id}`)).status, 404);
  t.is((await stack.api('DELETE', `/v1/admin/webhooks/${w.id}`)).status, 404);
});

test('a given secret is kept; PATCH with a secret rotates to it', async (t) => {
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: PUBLIC_URL, events: ['*'], secret: 'my-own-secret-1234567890' });
  t.is(created.body.secret, 'my-own-secret-1234567890');
  // Answers that show a secret are kept by no cache; the others are not marked.
  t.is(created.headers.get('cache-control'), 'no-store');
  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${created.body.id}`, { secret: 'another-secret-1234567890' });
  t.is(patched.status, 200);
  t.is(patched.body.secret, undefined);
  t.is(typeof patched.body.previous_secret_expires_at, 'number');
  const rotated = await stack.api('POST', `/v1/admin/webhooks/${created.body.id}/rotate-secret`);
  t.regex(rotated.body.secret, /^whsec_/);
  t.is(rotated.headers.get('cache-control'), 'no-store');
  t.is((await stack.api('GET', `/v1/admin/webhooks/${created.body.id}`)).headers.get('cache-control'), null);
  t.not(rotated.body.secret, 'another-secret-1234567890');
});

test('list is paginated', async (t) => {
  for (let i = 0; i < 3; i++) await stack.api('POST', '/v1/admin/webhooks', { url: `${PUBLIC_URL}${i}`, events: ['model.*'] });
  const page = await stack.api('GET', '/v1/admin/webhooks?limit=2&offset=0');
  t.is(page.body.data.length, 2);
  t.true(page.body.has_more);
  t.true(page.body.total_count >= 3);
  const bad = await stack.api('GET', '/v1/admin/webhooks?limit=0');
  t.is(bad.status, 400);
  t.is(bad.body.error.param, 'limit');
});

test('validation names the bad field', async (t) => {
  const cases: [unknown, string][] = [
    [{ events: ['*'] }, 'url'],
    [{ url: 'ftp://example.com/x', events: ['*'] }, 'url'],
    [{ url: 'not a url', events: ['*'] }, 'url'],
    [{ url: 'https://user:pw@example.com/x', events: ['*'] }, 'url'],
    [{ url: 'https://example.com:0/x', events: ['*'] }, 'url'],
    [{ url: PUBLIC_URL }, 'events'],
    [{ url: PUBLIC_URL, events: [] }, 'events'],
    [{ url: PUBLIC_URL, events: ['conversation.created', 'conversation.archived'] }, 'events[1]'],
    [{ url: PUBLIC_URL, events: ['conversation'] }, 'events[0]'],
    [{ url: PUBLIC_URL, events: ['**'] }, 'events[0]'],
    [{ url: PUBLIC_URL, events: ['user.*'] }, 'events[0]'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'X-Signature': 'forged' } }, 'headers.X-Signature'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'content-type': 'text/plain' } }, 'headers.content-type'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'Content-Encoding': 'gzip' } }, 'headers.Content-Encoding'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'X-Event-ID': 'x' } }, 'headers.X-Event-ID'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'X-Ok': 'a\r\nInjected: 1' } }, 'headers.X-Ok'],
    [{ url: PUBLIC_URL, events: ['*'], headers: { 'bad name': 'x' } }, 'headers.bad name'],
    [{ url: PUBLIC_URL, events: ['*'], secret: 'short' }, 'secret'],
    [{ url: PUBLIC_URL, events: ['*'], active: 'yes' }, 'active'],
    [{ url: PUBLIC_URL, events: ['*'], colour: 'red' }, ''],
  ];
  for (const [body, param] of cases) {
    const r = await stack.api('POST', '/v1/admin/webhooks', body);
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.error.type, 'invalid_request_error');
    if (param) t.is(r.body.error.param, param, JSON.stringify(body));
    t.notRegex(JSON.stringify(r.body), /\.ts:\d+|\n\s+at /, 'no stack trace');
  }
  // Whitespace around the URL is not part of it: stored (and shown) as the URL that is called.
  const w = await stack.api('POST', '/v1/admin/webhooks', { url: ` ${PUBLIC_URL}\n`, events: ['*'] });
  t.is(w.status, 201);
  t.is(w.body.url, PUBLIC_URL);
  const bad = await stack.api('PATCH', `/v1/admin/webhooks/${w.body.id}`, { events: ['nope'] });
  t.is(bad.status, 400);
  t.is(bad.body.error.param, 'events[0]');
  const badStatus = await stack.api('GET', `/v1/admin/webhooks/${w.body.id}/deliveries?status=lost`);
  t.is(badStatus.status, 400);
  t.is(badStatus.body.error.param, 'status');
});

test('only administrators reach the webhook API', async (t) => {
  const user = await createTestUser(stack.svc.runtime.db.knex);
  for (const [method, path] of [
    ['GET', '/v1/admin/webhooks'],
    ['POST', '/v1/admin/webhooks'],
    ['GET', '/v1/admin/webhooks/wh_x'],
    ['PATCH', '/v1/admin/webhooks/wh_x'],
    ['DELETE', '/v1/admin/webhooks/wh_x'],
    ['POST', '/v1/admin/webhooks/wh_x/rotate-secret'],
    ['POST', '/v1/admin/webhooks/wh_x/test'],
    ['GET', '/v1/admin/webhooks/wh_x/deliveries'],
    ['POST', '/v1/admin/webhooks/wh_x/deliveries/whd_x/redeliver'],
  ] as const) {
    const r = await stack.api(method, path, method === 'POST' || method === 'PATCH' ? { url: PUBLIC_URL, events: ['*'] } : undefined, user);
    t.is(r.status, 403, `${method} ${path}`);
    t.is(r.body.error.type, 'permission_error');
  }
  // Without identity: 401. Through /llm as well.
  const anon = await fetch(`${stack.svc.url}/llm/v1/admin/webhooks`, { headers: edgeHeaders(stack.svc.gatewaySecret) });
  t.is(anon.status, 401);
  const viaLlm = await fetch(`${stack.svc.url}/llm/v1/admin/webhooks`, { headers: edgeHeaders(stack.svc.gatewaySecret, stack.admin) });
  t.is(viaLlm.status, 200);
});

test('private, loopback and link-local targets are refused without EGRESS_ALLOW_HOSTS', async (t) => {
  for (const url of [receiver.url(), 'http://localhost:9/x', 'http://10.0.0.5/x', 'http://169.254.169.254/latest/meta-data', 'http://[::1]:8080/x', 'http://192.168.1.1/x', 'http://metadata.google.internal/x']) {
    const r = await stack.api('POST', '/v1/admin/webhooks', { url, events: ['*'] });
    t.is(r.status, 400, url);
    t.is(r.body.error.param, 'url');
  }
  const w = await stack.api('POST', '/v1/admin/webhooks', { url: PUBLIC_URL, events: ['*'] });
  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${w.body.id}`, { url: 'http://127.0.0.1:1/x' });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'url');
  await stack.api('DELETE', `/v1/admin/webhooks/${w.body.id}`);
});

test.serial('a delivery to a private target is refused at send time (not retried, nothing reaches the receiver)', async (t) => {
  // A subscription stored before the guard existed (or whose name now resolves privately): written directly.
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: PUBLIC_URL, events: ['mcp_tool.disabled'] });
  const id = created.body.id;
  await stack.svc.runtime.db.knex('webhooks').where({ id }).update({ url: receiver.url('/private') });
  await stack.emit('mcp_tool.disabled', { tool_id: 't' });
  const d = await waitFor(async () => {
    const r = await stack.api('GET', `/v1/admin/webhooks/${id}/deliveries`);
    return r.body.data[0]?.status === 'failed' ? r.body.data[0] : undefined;
  });
  t.is(d.attempt_count, 1);
  t.regex(d.last_error, /refused destination/);
  t.is(receiver.requests.length, 0);
});

test('unknown webhook and delivery ids are 404 naming the parameter', async (t) => {
  const r = await stack.api('GET', '/v1/admin/webhooks/wh_missing/deliveries');
  t.is(r.status, 404);
  t.is(r.body.error.param, 'webhook_id');
  const w = await stack.api('POST', '/v1/admin/webhooks', { url: PUBLIC_URL, events: ['*'] });
  const d = await stack.api('GET', `/v1/admin/webhooks/${w.body.id}/deliveries/whd_missing`);
  t.is(d.status, 404);
  t.is(d.body.error.param, 'delivery_id');
});
