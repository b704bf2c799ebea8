import test from 'ava';
import { Registry } from 'prom-client';
import { ManualClock } from '../../services/kit/index.js';
import { registerWebhookMetrics } from '../../domains/webhooks/metrics.js';
import type { DeliveriesStore } from '../../domains/webhooks/deliveries-store.js';
import { startReceiver, startStack, waitFor } from './helpers.js';

// llm-api's /metrics carries the webhook series, read from the database (the worker may be
// another process): attempts of the last hour by outcome, the pending backlog and its lag.
const series = (text: string, name: string, labels = '') => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels ? `{${labels}` : ''}`) && !l.startsWith('#'));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
};

test('attempts by outcome, pending deliveries and the delivery lag appear on llm-api /metrics', async (t) => {
  const receiver = await startReceiver((r) => (r.path === '/gone' ? 410 : 200));
  const stack = await startStack({ bus: 'pg' });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const scrape = async () => (await fetch(`${stack.svc.url}/metrics`)).text();
  const ok = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/ok'), events: ['*'] });
  const gone = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/gone'), events: ['*'] });
  const eventId = await stack.emit('model.added', { model_id: 'm' });
  await receiver.until((rs) => [ok.body.id, gone.body.id].every((id) => rs.some((r) => r.headers['x-webhook-id'] === id && r.headers['x-event-id'] === eventId)));
  // The receiver has both requests before the worker records their outcomes: wait until both are
  // recorded (each in its own statement, in either order) and nothing is left pending.
  const text = await waitFor(async () => {
    const body = await scrape();
    const recorded =
      (series(body, 'webhook_delivery_attempts_recent', 'outcome="failed"') ?? 0) >= 1 &&
      (series(body, 'webhook_delivery_attempts_recent', 'outcome="delivered"') ?? 0) >= 1 &&
      series(body, 'webhook_deliveries_pending') === 0;
    return recorded ? body : undefined;
  }, 15_000, 'both attempts recorded, nothing pending');
  t.is(series(text, 'webhook_delivery_attempts_recent', 'outcome="dead"'), 0);
  t.is(series(text, 'webhook_delivery_lag_seconds'), 0);

  // The worker is down and a delivery has been due for a minute: it is pending, and the lag shows it.
  await stack.stopWorker();
  await stack.svc.runtime.db.knex('webhook_deliveries').insert({
    id: 'whd_metrics_backlog_000000000',
    webhook_id: ok.body.id,
    event_id: 'evt_metrics_backlog_00000000',
    event_type: 'model.added',
    event_occurred_at: new Date(Date.now() - 120_000),
    event_data: JSON.stringify({}),
    next_attempt_at: new Date(Date.now() - 60_000),
    created_at: new Date(Date.now() - 60_000),
    updated_at: new Date(Date.now() - 60_000),
  });
  const backlog = await scrape();
  t.true((series(backlog, 'webhook_deliveries_pending') ?? 0) >= 1);
  t.true((series(backlog, 'webhook_delivery_lag_seconds') ?? 0) >= 60);
});

test('the pending count and the lag in one scrape come from one read of the backlog', async (t) => {
  // A delivery completes between two reads: the first sees it pending and due, the second does not.
  // One scrape must not show a lag beside nothing pending, whichever read it got.
  const clock = new ManualClock(Date.parse('2026-11-29T12:00:00Z'));
  const reads = [
    { pending: 1, oldestDue: new Date(clock.now() - 5_000) },
    { pending: 0, oldestDue: null },
  ];
  let calls = 0;
  const deliveries = {
    attemptsSince: async () => ({}),
    backlog: async () => reads[calls++ % reads.length],
  } as unknown as DeliveriesStore;
  const registry = new Registry();
  registerWebhookMetrics(registry, { deliveries, clock });

  const first = await registry.metrics();
  t.is(series(first, 'webhook_deliveries_pending'), 1);
  t.is(series(first, 'webhook_delivery_lag_seconds'), 5);
  const second = await registry.metrics();
  t.is(series(second, 'webhook_deliveries_pending'), 0);
  t.is(series(second, 'webhook_delivery_lag_seconds'), 0);
  t.is(calls, 2);
});

test('with the database unreachable the webhook series are left out of the scrape instead of failing it', async (t) => {
  const failing = async () => {
    throw new Error('connection refused');
  };
  const deliveries = { attemptsSince: failing, backlog: failing } as unknown as DeliveriesStore;
  const registry = new Registry();
  registerWebhookMetrics(registry, { deliveries, clock: new ManualClock() });
  const page = await registry.metrics();
  for (const name of ['webhook_delivery_attempts_recent', 'webhook_deliveries_pending', 'webhook_delivery_lag_seconds']) {
    t.true(page.includes(`# TYPE ${name} gauge`));
    t.is(series(page, name), undefined, `${name} has no value`);
  }
});
