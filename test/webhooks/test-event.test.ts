import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, type DeliveryJob } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey, type BusMessage, type Delivery } from '../../services/kit/index.js';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { createDeliveryHandler } from '../../workers/webhook-delivery/deliver.js';
import { createTestUser } from '../helpers/users.js';
import { startReceiver, startStack, type Receiver, type Stack } from './helpers.js';

// POST /v1/admin/webhooks/{id}/test sends a signed webhook.test event through the normal delivery
// path; failed and dead deliveries are logged at warn with webhook id, status and error, never a secret.
let stack: Stack;
let receiver: Receiver;

test.before(async () => {
  receiver = await startReceiver((r) => (r.path === '/gone' ? 410 : r.path === '/down' ? 503 : 200));
  stack = await startStack({ bus: 'pg' });
});
test.after.always(async () => {
  await stack?.close();
  await receiver?.close();
});

test.serial('the test endpoint sends a signed webhook.test event to that subscription, whatever its patterns', async (t) => {
  const secret = 'whsec_test_event_secret_0123456789';
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/ok'), events: ['model.added'], secret });
  const id = created.body.id as string;
  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  t.is(sent.status, 202);
  t.like(sent.body, { object: 'webhook.delivery', webhook_id: id, event_type: 'webhook.test', status: 'pending', attempt_count: 0 });
  const [got] = (await receiver.until((rs) => rs.some((r) => r.headers['x-event-type'] === 'webhook.test' && r.headers['x-webhook-id'] === id))).filter(
    (r) => r.headers['x-webhook-id'] === id,
  );
  t.is(got!.headers['x-event-id'], sent.body.event_id);
  t.like(got!.json, { type: 'webhook.test', id: sent.body.event_id, webhook_id: id, retry_count: 0, data: { webhook_id: id } });
  t.regex(String(got!.headers['x-signature']), /^sha256=[0-9a-f]{64}$/);
  t.deepEqual(verifyWebhookSignature({ body: got!.body, signature: String(got!.headers['x-signature']), timestamp: String(got!.headers['x-timestamp']), secret }), { ok: true });
  // Recorded like any delivery.
  const delivery = await stack.api('GET', `/v1/admin/webhooks/${id}/deliveries/${sent.body.id}`);
  t.is(delivery.body.event_type, 'webhook.test');
});

test.serial('the test endpoint: 404 for an unknown webhook, 409 for an inactive one, 403 for a non-admin', async (t) => {
  const missing = await stack.api('POST', '/v1/admin/webhooks/wh_missing/test');
  t.is(missing.status, 404);
  t.is(missing.body.error.param, 'webhook_id');
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/ok'), events: ['*'], active: false });
  const inactive = await stack.api('POST', `/v1/admin/webhooks/${created.body.id}/test`);
  t.is(inactive.status, 409);
  t.is(inactive.body.error.param, 'webhook_id');
  const user = await createTestUser(stack.svc.runtime.db.knex);
  const denied = await stack.api('POST', `/v1/admin/webhooks/${created.body.id}/test`, undefined, user);
  t.is(denied.status, 403);
  t.is(denied.body.error.type, 'permission_error');
});

test.serial('failed, retried and dead deliveries are logged at warn with webhook id, status and error, and no secret', async (t) => {
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const config = stack.svc.runtime.config;
  const knex = stack.svc.runtime.db.knex;
  const handle = createDeliveryHandler({
    deliveries: createDeliveriesStore(knex),
    box: createSecretBox(loadMasterKey(config)),
    guard: createEgressGuard({ allowHosts: ['127.0.0.1'] }),
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'info' }, sink),
    schedule: [1000],
    timeoutMs: 5000,
    concurrencyPerSubscription: 2,
    prefetch: 8,
    busyDelayMs: 100,
  });
  // Deliveries are made here, by this handler: the stack's own worker is stopped.
  await stack.stopWorker();
  t.teardown(() => stack.startWorker());
  const secrets: string[] = [];
  const attempt = async (path: string, attempts: number) => {
    const secret = `whsec_log_${path.slice(1)}_secret_0123456789`;
    secrets.push(secret);
    const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url(path), events: ['*'], secret });
    const sent = await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`);
    for (let n = 0; n < attempts; n++) {
      const settled: string[] = [];
      const delivery: Delivery = {
        ack: async () => void settled.push('ack'),
        retryAfter: async () => void settled.push('retry'),
        deadLetter: async () => void settled.push('dead'),
      };
      const message: BusMessage<DeliveryJob> = { id: sent.body.id, routingKey: 'x', body: { delivery_id: sent.body.id }, headers: { 'x-webhook-attempt': String(n) }, redelivered: false };
      await handle(message, delivery);
      t.is(settled.length, 1);
    }
    return hook.body.id as string;
  };

  const gone = await attempt('/gone', 1);
  const down = await attempt('/down', 2);
  const warns = lines.filter((l) => l.level === 40);
  const failed = warns.find((l) => l.webhook_id === gone);
  t.like(failed, { status: 410, error: 'receiver answered 410', outcome: 'failed', msg: 'webhook delivery failed and will not be retried' });
  const [retry, dead] = warns.filter((l) => l.webhook_id === down);
  t.like(retry, { status: 503, error: 'receiver answered 503', outcome: 'retry', attempt: 1, next_attempt_in_ms: 1000 });
  t.like(dead, { status: 503, error: 'receiver answered 503', outcome: 'dead', attempt: 2, msg: 'webhook delivery is dead after its last attempt' });
  for (const line of warns) t.truthy(line.delivery_id);
  const all = JSON.stringify(lines);
  for (const secret of secrets) t.false(all.includes(secret));
  t.false(all.includes(receiver.url('/gone')), 'the URL is not logged (it may embed a token)');
});
