import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, createWebhooksStore, type WebhookRow } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey } from '../../services/kit/index.js';
import { rotateSecret, sendTestEvent, type WebhooksDeps } from '../../services/llm-api/webhooks/domain.js';
import { receiverAndStack, waitFor, type Receiver, type Stack } from './helpers.js';

// Edges of the webhook admin API: redelivery to an inactive subscription, the parameter an unknown
// webhook is named by, custom header names that differ only in case, and two rotations at once.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { bus: 'pg' } }, (r, s) => {
  receiver = r;
  stack = s;
});

test('redelivering to an inactive webhook is refused (409) and leaves the delivery as it was', async (t) => {
  const hook = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/inactive'), events: ['model.added'] })).body;
  const sent = (await stack.api('POST', `/v1/admin/webhooks/${hook.id}/test`)).body;
  const path = `/v1/admin/webhooks/${hook.id}/deliveries/${sent.id}`;
  const delivered = await waitFor(async () => {
    const r = await stack.api('GET', path);
    return r.body.status === 'delivered' ? r.body : undefined;
  }, 30_000, 'test event delivered');
  t.is((await stack.api('PATCH', `/v1/admin/webhooks/${hook.id}`, { active: false })).status, 200);

  const refused = await stack.api('POST', `${path}/redeliver`);
  t.is(refused.status, 409);
  t.is(refused.body.error.type, 'invalid_request_error');
  t.is(refused.body.error.param, 'webhook_id');
  // An unknown delivery of that webhook is still a 404 naming the delivery.
  const missing = await stack.api('POST', `/v1/admin/webhooks/${hook.id}/deliveries/whd_missing/redeliver`);
  t.is(missing.status, 404);
  t.is(missing.body.error.param, 'delivery_id');

  // The record keeps its outcome: still delivered, with its time, no "webhook is inactive" error.
  const after = (await stack.api('GET', path)).body;
  t.like(after, { status: 'delivered', attempt_count: 1, delivered_at: delivered.delivered_at, last_error: null });
  const row = await stack.svc.runtime.db.knex('webhook_deliveries').where({ id: sent.id }).first();
  t.is(row.status, 'delivered');

  // Active again: redelivery is accepted and sent.
  t.is((await stack.api('PATCH', `/v1/admin/webhooks/${hook.id}`, { active: true })).status, 200);
  const again = await stack.api('POST', `${path}/redeliver`);
  t.is(again.status, 202);
  await receiver.until((all) => all.filter((r) => r.headers['x-webhook-id'] === hook.id).length === 2, 30_000, 'redelivered');
  t.is(receiver.for(hook.id).length, 2);
});

test('a delivery looked up under an unknown webhook is a 404 naming webhook_id', async (t) => {
  const r = await stack.api('GET', '/v1/admin/webhooks/wh_missing/deliveries/whd_missing');
  t.is(r.status, 404);
  t.is(r.body.error.type, 'not_found_error');
  t.is(r.body.error.param, 'webhook_id');
  // Under a webhook that exists, the unknown delivery is named.
  const hook = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/lookup'), events: ['*'] })).body;
  const d = await stack.api('GET', `/v1/admin/webhooks/${hook.id}/deliveries/whd_missing`);
  t.is(d.status, 404);
  t.is(d.body.error.param, 'delivery_id');
});

test('custom header names that differ only in case are refused, naming the second spelling', async (t) => {
  // Sent as one header, only one value would arrive: refused instead of dropping one silently.
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/dup'), events: ['*'], headers: { 'X-Team': 'a', 'x-team': 'b' } });
  t.is(created.status, 400);
  t.is(created.body.error.type, 'invalid_request_error');
  t.is(created.body.error.param, 'headers.x-team');
  const hook = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/dup'), events: ['*'], headers: { 'X-Team': 'a', 'X-Other': 'b' } })).body;
  t.deepEqual(hook.headers, { 'X-Team': '[redacted]', 'X-Other': '[redacted]' });
  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${hook.id}`, { headers: { 'X-Auth': '1', 'X-AUTH': '2' } });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'headers.X-AUTH');
  t.deepEqual((await stack.api('GET', `/v1/admin/webhooks/${hook.id}`)).body.headers, { 'X-Team': '[redacted]', 'X-Other': '[redacted]' });
});

/** The admin domain's dependencies on the stack's database and bus, with `webhooks` as the store (a test's wrapper around it). */
function domainDeps(webhooks: WebhooksDeps['webhooks']): WebhooksDeps {
  const knex = stack.svc.runtime.db.knex;
  return {
    webhooks,
    deliveries: createDeliveriesStore(knex),
    box: createSecretBox(loadMasterKey(stack.svc.runtime.config)),
    guard: createEgressGuard(),
    bus: stack.svc.runtime.bus,
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'silent' }),
    secretGraceSeconds: 3600,
    checkTimeoutMs: 1000,
  };
}

test('two rotations at once: the secret each one answered still signs (current or previous)', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const box = createSecretBox(loadMasterKey(stack.svc.runtime.config));
  const created = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/rotate'), events: ['*'], secret: 'original-secret-0123456789' })).body;
  const store = createWebhooksStore(knex);
  // Both rotations read the subscription before either writes (two admins, or a retried request).
  let arrived = 0;
  let bothRead!: () => void;
  const barrier = new Promise<void>((resolve) => (bothRead = resolve));
  const webhooks = {
    ...store,
    async get(id: string): Promise<WebhookRow | undefined> {
      const row = await store.get(id);
      if (++arrived === 2) bothRead();
      await barrier;
      return row;
    },
  };
  const deps = domainDeps(webhooks);
  const [a, b] = await Promise.all([rotateSecret(deps, created.id), rotateSecret(deps, created.id)]);
  t.not(a.secret, b.secret);
  const row = (await store.get(created.id))!;
  const current = box.open(row.secret_sealed, row.id);
  const previous = row.previous_secret_sealed ? box.open(row.previous_secret_sealed, row.id) : null;
  // One of the two is current; the other, handed out a moment before, keeps signing as the previous one.
  t.deepEqual([current, previous].sort(), [a.secret!, b.secret!].sort());
});

test('a test event whose webhook is deleted while it is sent is a 404 naming webhook_id, not a 500', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const created = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/deleted-meanwhile'), events: ['*'] })).body;
  const store = createWebhooksStore(knex);
  // The DELETE lands between the read of the subscription and the insert of its test delivery.
  const webhooks = {
    ...store,
    async get(id: string): Promise<WebhookRow | undefined> {
      const row = await store.get(id);
      t.is((await stack.api('DELETE', `/v1/admin/webhooks/${id}`)).status, 204);
      return row;
    },
  };
  const deps = domainDeps(webhooks);
  const error = await t.throwsAsync(sendTestEvent(deps, created.id));
  t.like(error, { status: 404, param: 'webhook_id' });
});
