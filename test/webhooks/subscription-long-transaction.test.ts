import test from 'ava';
import { createWebhooksStore } from '../../domains/webhooks/index.js';
import { createSecretBox, loadMasterKey, newId, recordEvent } from '../../services/kit/index.js';
import { receiverAndStack, waitFor, type Receiver, type Stack } from './helpers.js';

// "Created before the event" compares the moment the event was recorded with the moment the
// subscription was, both by the database's clock, whatever transaction either was part of: a long
// transaction neither hides its later events from a subscription created while it ran, nor lets a
// subscription begun in one receive events recorded before it was inserted.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { bus: 'pg' } }, (r, s) => {
  receiver = r;
  stack = s;
});

const delivered = (webhookId: string, eventId: string) =>
  receiver.until((rs) => rs.some((r) => r.headers['x-webhook-id'] === webhookId && r.headers['x-event-id'] === eventId), 30_000, `${eventId} to ${webhookId}`);
const deliveriesOf = (webhookId: string) => stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: webhookId }).pluck('event_id');

test.serial('an event recorded by a long transaction after a subscription was created reaches it', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const old = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/old'), events: ['*'] })).body.id as string;
  const trx = await knex.transaction();
  try {
    await trx.raw('select 1'); // the transaction has begun (its now() is fixed)
    const fresh = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/fresh'), events: ['*'] })).body.id as string;
    const eventId = await recordEvent(trx, 'model.added', { model_id: 'long-transaction' });
    await trx.commit();
    stack.svc.runtime.relay.kick();
    await delivered(old, eventId);
    // One fan-out inserts every delivery of the event: the old subscription's exists, so the fresh one's would.
    t.deepEqual(await deliveriesOf(fresh), [eventId]);
    await delivered(fresh, eventId);
  } finally {
    if (!trx.isCompleted()) await trx.rollback();
  }
});

test.serial('a subscription inserted by a transaction begun before an event was recorded does not receive that event', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const box = createSecretBox(loadMasterKey(stack.svc.runtime.config));
  const old = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/old2'), events: ['*'] })).body.id as string;
  // The fan-out runs only once the subscription is committed (a lagging pipeline).
  await stack.stopWorker();
  const trx = await knex.transaction();
  let fresh = '';
  let earlier = '';
  try {
    await trx.raw('select 1');
    earlier = await stack.emit('model.added', { model_id: 'before-the-insert' });
    fresh = newId('webhook');
    await createWebhooksStore(trx).insert(
      { id: fresh, url: receiver.url('/fresh2'), events: ['*'], active: true, headers: {}, secret_sealed: box.seal('whsec_long_transaction_0123456789', fresh), created_by: null },
      new Date(),
    );
    await trx.commit();
  } finally {
    if (!trx.isCompleted()) await trx.rollback();
  }
  const later = await stack.emit('model.added', { model_id: 'after-the-insert' });
  await waitFor(async () => (await knex('outbox_events').whereIn('id', [earlier, later]).whereNull('published_at')).length === 0, 15_000, 'both events relayed');
  await stack.startWorker();
  await delivered(old, earlier);
  await delivered(old, later);
  await delivered(fresh, later);
  t.deepEqual(await deliveriesOf(fresh), [later]);
});
