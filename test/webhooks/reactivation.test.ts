import test from 'ava';
import { startReceiver, startStack, waitFor } from './helpers.js';

// A subscription made active again while the pipeline lags (the worker down, a backlog) subscribes
// anew: it receives none of the events that occurred while it was inactive, only the later ones.
for (const bus of ['amqp', 'pg'] as const) {
  test(`${bus}: a subscription reactivated while the pipeline lags receives none of the events of its inactive time`, async (t) => {
    const receiver = await startReceiver();
    const stack = await startStack({ bus });
    t.teardown(async () => {
      await stack.close();
      await receiver.close();
    });
    const anchor = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/anchor'), events: ['*'] });
    const paused = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/paused'), events: ['*'], active: false });
    t.is(paused.status, 201);

    // The worker is down: an event occurs while the subscription is inactive and waits on the bus.
    await stack.stopWorker();
    const during = await stack.emit('conversation.created', { conversation_id: 'conv_during' });
    await waitFor(async () => {
      const row = await stack.svc.runtime.db.knex('outbox_events').where({ id: during }).first('published_at');
      return row?.published_at ? row : undefined;
    }, 15_000, 'event relayed to the bus');

    const resumed = await stack.api('PATCH', `/v1/admin/webhooks/${paused.body.id}`, { active: true });
    t.is(resumed.status, 200);
    t.is(resumed.body.active, true);
    const after = await stack.emit('conversation.created', { conversation_id: 'conv_after' });

    await stack.startWorker();
    await receiver.until((rs) => [during, after].every((id) => rs.some((r) => r.headers['x-webhook-id'] === anchor.body.id && r.headers['x-event-id'] === id)), 30_000, 'anchor got both events');
    await receiver.until((rs) => rs.some((r) => r.headers['x-webhook-id'] === paused.body.id && r.headers['x-event-id'] === after), 30_000, 'reactivated subscription got the later event');
    // Both events are fanned out by now (the anchor has a delivery of each): the reactivated one has only the later.
    const deliveries = await stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: paused.body.id }).pluck('event_id');
    t.deepEqual(deliveries, [after]);
    t.deepEqual(receiver.for(paused.body.id).map((r) => String(r.headers['x-event-id'])), [after]);
  });
}

test('PATCH of an active subscription (even with active: true) keeps the events it is owed', async (t) => {
  const receiver = await startReceiver();
  const stack = await startStack({ bus: 'pg' });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/kept'), events: ['*'] });
  await stack.stopWorker();
  const earlier = await stack.emit('model.added', { model_id: 'm' });
  await waitFor(async () => {
    const row = await stack.svc.runtime.db.knex('outbox_events').where({ id: earlier }).first('published_at');
    return row?.published_at ? row : undefined;
  }, 15_000, 'event relayed to the bus');
  // Already active: no new subscription time, the event that occurred before the PATCH is still delivered.
  t.is((await stack.api('PATCH', `/v1/admin/webhooks/${hook.body.id}`, { active: true, headers: { 'X-Team': 'a' } })).status, 200);
  await stack.startWorker();
  const [got] = (await receiver.until((rs) => rs.some((r) => r.headers['x-event-id'] === earlier), 30_000, 'earlier event delivered')).filter((r) => r.headers['x-event-id'] === earlier);
  t.is(got!.headers['x-webhook-id'], hook.body.id);
  t.is(got!.headers['x-team'], 'a');
});
