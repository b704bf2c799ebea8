import { validateHeaderValue } from 'node:http';
import test from 'ava';
import { createWebhookSchema } from '../../services/llm-api/webhooks/schemas.js';
import { receiverAndStack, type Receiver, type Stack } from './helpers.js';

// A subscription's own headers are sent on every delivery by Node's HTTP client, so registration
// refuses what that client cannot send (it would fail every attempt with ERR_INVALID_CHAR and end
// dead) or would not send as registered (non-ASCII text), and bounds their total size to what
// receivers accept (8 KiB).
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { bus: 'pg' } }, (r, s) => {
  receiver = r;
  stack = s;
});

const UNSENDABLE = ['euro\u20ac', '東京', 'caf\u00e9', 'nbsp\u00a0', 'ctl\u0001x', 'esc\u001b[0m', 'del\u007f', 'c1\u0085x', 'nul\u0000', 'vt\u000b', 'emoji\u{1f600}'];

test('a header value the delivery could not send is refused with 400 naming the header, on create and on update', async (t) => {
  for (const value of UNSENDABLE) {
    const r = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/h'), events: ['*'], headers: { 'X-Team': value } });
    t.is(r.status, 400, JSON.stringify(value));
    t.is(r.body.error.type, 'invalid_request_error');
    t.is(r.body.error.code, 'invalid_parameter');
    t.is(r.body.error.param, 'headers.X-Team', JSON.stringify(value));
    t.is(typeof r.body.error.request_id, 'string');
  }
  const w = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/h'), events: ['*'] });
  t.is(w.status, 201);
  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${w.body.id}`, { headers: { 'X-Team': 'euro\u20ac' } });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'headers.X-Team');
});

test('custom headers are bounded to 8 KiB in total', async (t) => {
  // 4 headers of "X-Big-n: <2030 chars>\r\n" = 4 * (7 + 2 + 2030 + 2) = 8164 bytes: accepted.
  const fits = Object.fromEntries([0, 1, 2, 3].map((i) => [`X-Big-${i}`, 'a'.repeat(2030)]));
  const ok = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/h'), events: ['*'], headers: fits });
  t.is(ok.status, 201);
  // One more short header brings it over 8192.
  const over = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/h'), events: ['*'], headers: { ...fits, 'X-More': 'b'.repeat(30) } });
  t.is(over.status, 400);
  t.is(over.body.error.type, 'invalid_request_error');
  t.is(over.body.error.param, 'headers');
  t.regex(over.body.error.message, /8192 bytes/);
});

test('every value registration accepts is one Node can send as a header', (t) => {
  let accepted = 0;
  for (let code = 0; code <= 0x2ff; code++) {
    const value = `a${String.fromCodePoint(code)}b`;
    const parsed = createWebhookSchema.safeParse({ url: 'https://hooks.example.invalid/h', events: ['*'], headers: { 'X-Team': value } });
    let sendable = true;
    try {
      validateHeaderValue('X-Team', value);
    } catch {
      sendable = false;
    }
    if (parsed.success) {
      accepted++;
      t.true(sendable, `U+${code.toString(16).padStart(4, '0')} is accepted but cannot be sent`);
    }
  }
  // Tab, and space to tilde.
  t.is(accepted, 1 + 95);
});

test('accepted values, tab included, reach the receiver as registered', async (t) => {
  const headers = { 'X-Team': 'team a\tend', 'X-Plain': '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~' };
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/latin1'), events: ['model.added'], headers });
  t.is(created.status, 201);
  t.deepEqual(created.body.headers, { 'X-Team': '[redacted]', 'X-Plain': '[redacted]' });
  const id = created.body.id as string;
  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  t.is(sent.status, 202);
  const got = (await receiver.until((rs) => rs.some((r) => r.headers['x-webhook-id'] === id))).find((r) => r.headers['x-webhook-id'] === id)!;
  // The tab inside the value is kept.
  t.is(got.headers['x-team'], headers['X-Team']);
  t.is(got.headers['x-plain'], headers['X-Plain']);
});
