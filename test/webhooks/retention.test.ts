import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import { startReceiver, startStack, waitFor, type Receiver, type Stack } from './helpers.js';

// WEBHOOK_DELIVERY_RETENTION_DAYS: the worker deletes ended deliveries (delivered, failed, dead)
// and their attempts once they ended longer ago than the retention (when it starts, then hourly);
// a pending delivery is never deleted, however old.
const DAY = 86_400_000;
const clock = new ManualClock(Date.UTC(2026, 11, 1));
let stack: Stack;
let receiver: Receiver;

test.before(async () => {
  receiver = await startReceiver();
  stack = await startStack({ clock, worker: false, env: { WEBHOOK_DELIVERY_RETENTION_DAYS: '30' } });
});
test.after.always(async () => {
  await stack?.close();
  await receiver?.close();
});

test('ended deliveries past the retention are deleted with their attempts; recent and pending ones stay', async (t) => {
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/retention'), events: ['*'] });
  t.is(hook.status, 201, JSON.stringify(hook.body));
  const knex = stack.svc.runtime.db.knex;
  const ago = (days: number) => new Date(clock.now() - days * DAY);
  const delivery = (id: string, status: string, endedDaysAgo: number) => ({
    id,
    webhook_id: hook.body.id,
    event_id: `evt_${id}`,
    event_type: 'conversation.created',
    event_occurred_at: ago(endedDaysAgo + 1),
    event_data: JSON.stringify({ id }),
    status,
    created_at: ago(endedDaysAgo + 1),
    updated_at: ago(endedDaysAgo),
  });
  await knex('webhook_deliveries').insert([
    delivery('whd_old_delivered', 'delivered', 31),
    delivery('whd_old_dead', 'dead', 45),
    delivery('whd_old_failed', 'failed', 30.5),
    delivery('whd_recent_delivered', 'delivered', 29),
    delivery('whd_old_pending', 'pending', 100),
  ]);
  await knex('webhook_delivery_attempts').insert([
    { delivery_id: 'whd_old_dead', attempt: 1, retry_count: 0, duration_ms: 5, outcome: 'dead', attempted_at: ago(45) },
    { delivery_id: 'whd_recent_delivered', attempt: 1, retry_count: 0, duration_ms: 5, outcome: 'delivered', attempted_at: ago(29) },
  ]);
  const ids = async () => (await knex('webhook_deliveries').where({ webhook_id: hook.body.id }).orderBy('id').pluck('id')) as string[];

  await stack.startWorker(); // the first pass runs at start
  await waitFor(async () => (await ids()).length === 2, 10_000, 'the ended deliveries past their retention deleted');
  t.deepEqual(await ids(), ['whd_old_pending', 'whd_recent_delivered']);
  t.deepEqual(await knex('webhook_delivery_attempts').whereIn('delivery_id', ['whd_old_dead', 'whd_recent_delivered']).orderBy('delivery_id').pluck('delivery_id'), ['whd_recent_delivered']);
});
