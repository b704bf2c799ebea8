import test from 'ava';
import { startReceiver, startStack, waitFor, type Receiver, type Stack } from './helpers.js';

/**
 * Hanging receivers never stall the others, on one bus driver. Four subscriptions whose receiver
 * never answers, each with WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION = 2, could between them hold all
 * of WEBHOOK_PREFETCH = 8 jobs (4 × 2 in flight, or 2 × (2 in flight + 2 waiting)); a healthy
 * subscription's event must still be delivered while every hanging request is still open. The
 * attempts' timeout is far beyond the test's bound, so no slot is freed by a timeout meanwhile.
 */
export function slowReceiversContract(bus: 'amqp' | 'pg') {
  let stack: Stack;
  let slow: Receiver;
  let healthy: Receiver;
  let answering = false;

  test.before(async () => {
    slow = await startReceiver(() => (answering ? 200 : 'hang'));
    healthy = await startReceiver(() => 204);
    stack = await startStack({
      bus,
      env: {
        WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '2',
        WEBHOOK_PREFETCH: '8',
        WEBHOOK_TIMEOUT_MS: '600000',
        WEBHOOK_BUSY_DELAY_MS: '50',
        WEBHOOK_RETRY_SCHEDULE: '1h',
      },
    });
  });
  test.after.always(async () => {
    slow?.release();
    await stack?.close();
    await slow?.close();
    await healthy?.close();
  });

  test.serial('hanging receivers holding 2 x 4 >= prefetch jobs do not delay a healthy subscription', async (t) => {
    const subscribe = async (url: string, events: string[]) => (await stack.api('POST', '/v1/admin/webhooks', { url, events })).body.id as string;
    const stuck: string[] = [];
    for (let i = 0; i < 4; i++) stuck.push(await subscribe(slow.url(`/slow${i}`), ['conversation.*']));
    const fine = await subscribe(healthy.url('/fine'), ['model.added']);
    for (let i = 0; i < 4; i++) await stack.emit('conversation.created', { conversation_id: `conv_${i}` });
    // All 16 jobs are on the delivery queue before the healthy event is (it queues behind them) …
    const knex = stack.svc.runtime.db.knex;
    await waitFor(async () => Number((await knex('webhook_deliveries').where({ queued: true }).count({ n: '*' }))[0]!.n) === 16, 30_000, '16 deliveries queued');
    // … and every hanging subscription has a request open.
    await slow.until(() => stuck.every((id) => slow.for(id).length > 0), 30_000, 'each hanging receiver holding a request');

    const eventId = await stack.emit('model.added', { model_id: 'm1' });
    const [got] = await healthy.until((all) => all.length > 0, 20_000, 'the healthy subscription reached while the others hang');
    t.is(got!.headers['x-event-id'], eventId);
    t.is(got!.headers['x-webhook-id'], fine);
    // Nothing hanging was answered or timed out meanwhile: each request sent to them is still open.
    t.is(slow.hanging(), slow.requests.length);
    for (const id of stuck) t.true(slow.for(id).length <= 2, `a subscription holds at most its own bound (${slow.for(id).length})`);
    t.true(slow.hanging() < 8, `the hanging receivers hold fewer than the prefetch window (${slow.hanging()})`);

    // The parked jobs were not lost: once the receivers answer, every delivery ends delivered.
    answering = true;
    slow.release();
    await waitFor(async () => {
      const rows = await knex('webhook_deliveries').whereIn('webhook_id', stuck).select('status');
      return rows.length === 16 && rows.every((r: { status: string }) => r.status === 'delivered');
    }, 30_000, 'every parked delivery delivered');
    t.is(new Set(slow.requests.map((r) => `${r.headers['x-webhook-id']} ${r.headers['x-event-id']}`)).size, 16);
  });
}
