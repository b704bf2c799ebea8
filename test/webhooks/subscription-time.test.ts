import test from 'ava';
import { startReceiver, startStack, waitFor } from './helpers.js';

// A lagging pipeline: events commit while the delivery worker is stopped, then a new subscription
// is created, then the worker catches up. The new subscription must receive only events that
// occurred at or after its creation (database time); the older one receives everything.
for (const bus of ['amqp', 'pg'] as const) {
  test(`${bus}: a subscription created while the pipeline lags receives none of the events that occurred before it`, async (t) => {
    const receiver = await startReceiver();
    const stack = await startStack({ bus });
    t.teardown(async () => {
      await stack.close();
      await receiver.close();
    });
    const old = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/old'), events: ['*'] });
    t.is(old.status, 201);

    // The worker is down: events commit, are relayed and wait in the fan-out queue.
    await stack.stopWorker();
    const before: string[] = [];
    for (let i = 0; i < 20; i++) before.push(await stack.emit('message.sent', { n: i }));
    await waitFor(async () => {
      const row = await stack.svc.runtime.db.knex('outbox_events').whereIn('id', before).whereNull('published_at').count<{ c: string }[]>({ c: '*' }).first();
      return Number(row?.c) === 0;
    }, 15_000, 'every earlier event relayed to the bus');

    const fresh = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/fresh'), events: ['*'] });
    t.is(fresh.status, 201);
    const after: string[] = [];
    for (let i = 0; i < 3; i++) after.push(await stack.emit('message.sent', { n: 100 + i }));

    // The pipeline catches up with the whole backlog.
    await stack.startWorker();
    const all = [...before, ...after];
    await receiver.until((rs) => all.every((id) => rs.some((r) => r.headers['x-webhook-id'] === old.body.id && r.headers['x-event-id'] === id)), 30_000, 'old subscription got every event');
    await receiver.until((rs) => after.every((id) => rs.some((r) => r.headers['x-webhook-id'] === fresh.body.id && r.headers['x-event-id'] === id)), 30_000, 'new subscription got the later events');
    // Every event has been fanned out by now (the old subscription has a delivery for each).
    const freshDeliveries = await stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: fresh.body.id }).pluck('event_id');
    t.deepEqual([...freshDeliveries].sort(), [...after].sort());
    t.deepEqual(receiver.for(fresh.body.id).map((r) => String(r.headers['x-event-id'])).sort(), [...after].sort());
    t.is(receiver.for(old.body.id).length, all.length);
  });
}

test('the comparison is exact to the microsecond: created at the same instant receives it, one microsecond later does not', async (t) => {
  const receiver = await startReceiver();
  const stack = await startStack({ bus: 'pg' });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const knex = stack.svc.runtime.db.knex;
  const same = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/same'), events: ['*'] });
  const later = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/later'), events: ['*'] });
  await stack.stopWorker();
  const eventId = await stack.emit('model.added', { model_id: 'm' });
  await knex('webhooks').where({ id: same.body.id }).update({ subscribed_at: knex('outbox_events').where({ id: eventId }).select('occurred_at') });
  await knex('webhooks')
    .where({ id: later.body.id })
    .update({ subscribed_at: knex('outbox_events').where({ id: eventId }).select(knex.raw("occurred_at + interval '1 microsecond'")) });
  await stack.startWorker();
  await receiver.until((rs) => rs.some((r) => r.headers['x-webhook-id'] === same.body.id && r.headers['x-event-id'] === eventId), 30_000, 'same-instant subscription got it');
  // The fan-out of this one event is complete once one delivery exists; no second may appear.
  const deliveries = await knex('webhook_deliveries').where({ event_id: eventId }).pluck('webhook_id');
  t.deepEqual(deliveries, [same.body.id]);
});
