import test, { type ExecutionContext } from 'ava';
import type { Knex } from 'knex';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createDeliveriesStore, DELIVERY_QUEUE, registerWebhookMetrics, webhooksMigrationSet, type DeliveryJob } from '../../domains/webhooks/index.js';
import { createDatabase, kitMigrations, ManualClock, migrateAll, type Bus, type Database } from '../../services/kit/index.js';
import { sweepOverdue } from '../../workers/webhook-delivery/sweep.js';
import { startReceiver, startStack, type Receiver, type Stack } from './helpers.js';

// The sweep re-enqueues pending deliveries overdue by WEBHOOK_SWEEP_GRACE_MS (their job may have been
// lost) and marks them as re-enqueued. The mark leaves the time the attempt was due as it is: an
// attempt a worker records while the sweep runs keeps its next attempt hours away (not made early
// by a later sweep), and the lag metric still counts from when the delivery was due. A delivery that
// stays overdue (its receiver slow, its job alive on the bus) gets its duplicate jobs ever further
// apart, not one per grace period.
const MINUTE = 60_000;
const GRACE = 5 * MINUTE;
const clock = new ManualClock(Date.UTC(2026, 11, 1, 12));
let stack: Stack;
let receiver: Receiver;

let embedded: Database;

test.before(async () => {
  receiver = await startReceiver();
  stack = await startStack({ bus: 'pg', clock, worker: false });
  // The embedded database (PGlite) runs the same migrations and statements.
  embedded = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(embedded.knex, [kitMigrations, webhooksMigrationSet]);
});
test.after.always(async () => {
  await embedded?.close();
  await stack?.close();
  await receiver?.close();
});

/** The plan nodes of an `explain (format json)` answer, depth first. */
function planNodes(node: Record<string, any>): Record<string, any>[] {
  return [node, ...((node['Plans'] as Record<string, any>[] | undefined) ?? []).flatMap(planNodes)];
}

// Deliveries still backing off after a sweep are due long before the ones now overdue (a slow
// receiver's backlog, waiting for hours): the sweep must read the overdue ones from its index without
// walking the backing-off ones first (one sweep a minute would otherwise read the whole backlog).
async function backingOffRowsAreNotRead(t: ExecutionContext, knex: Knex, webhookId: string, tag: string) {
  const deliveries = createDeliveriesStore(knex);
  const now = clock.now();
  const row = (id: string, dueAgoMs: number) => ({
    id,
    webhook_id: webhookId,
    event_id: `evt_${id}`,
    event_type: 'model.updated',
    event_occurred_at: new Date(now - dueAgoMs),
    event_data: JSON.stringify({ model_id: 'm' }),
    queued: true,
    next_attempt_at: new Date(now - dueAgoMs),
  });
  const backingOff = Array.from({ length: 6 }, (_, i) => `whd_${tag}off${i}`);
  const overdue = [`whd_${tag}due0`, `whd_${tag}due1`];
  await knex('webhook_deliveries').insert([...backingOff.map((id) => row(id, 180 * MINUTE)), ...overdue.map((id) => row(id, 60 * MINUTE))]);
  t.teardown(() => knex('webhook_deliveries').whereIn('id', [...backingOff, ...overdue]).del());
  // Swept two minutes ago: not again before three more minutes.
  await deliveries.touch(
    backingOff.map((id) => ({ id, attempts: 0 })),
    new Date(now - 2 * MINUTE),
    GRACE,
  );

  // A batch of two: the overdue ones, not the older ones still backing off.
  let query: { sql: string; bindings: readonly unknown[] } | undefined;
  const listen = (q: { sql: string; bindings?: readonly unknown[] }) => {
    if (/^select/i.test(q.sql) && /limit/i.test(q.sql)) query = { sql: q.sql, bindings: q.bindings ?? [] };
  };
  knex.on('query', listen);
  let picked: { id: string }[];
  try {
    picked = await deliveries.overdue(new Date(now), GRACE, 2);
  } finally {
    knex.removeListener('query', listen);
  }
  t.deepEqual(picked.map((d) => d.id).sort(), overdue, tag);
  // Past their back-off, they are overdue again, after the ones due earlier.
  const later = await deliveries.overdue(new Date(now + 4 * MINUTE), GRACE, 100);
  t.deepEqual(later.slice(0, 2).map((d) => d.id).sort(), overdue, tag);
  t.deepEqual(later.slice(2).map((d) => d.id).sort(), backingOff, tag);

  // The sweep's statement, as the database runs it with an index (a table this small would be read
  // whole otherwise): the pending rows' index on the column it compares, and no row read then dropped.
  const plan = await knex.transaction(async (trx) => {
    await trx.raw('set local enable_seqscan = off');
    const sql = query!.sql.replace(/\$\d+/g, '?');
    const result = await trx.raw(`explain (analyze, format json) ${sql}`, query!.bindings as Knex.RawBinding[]);
    const cell = (result.rows as Record<string, unknown>[])[0]!['QUERY PLAN'];
    return (typeof cell === 'string' ? JSON.parse(cell) : cell) as { Plan: Record<string, any> }[];
  });
  const scans = planNodes(plan[0]!.Plan).filter((n) => n['Relation Name'] === 'webhook_deliveries');
  t.is(scans.length, 1, `${tag}: ${JSON.stringify(plan)}`);
  t.is(scans[0]!['Index Name'], 'webhook_deliveries_sweep_due', `${tag}: ${JSON.stringify(plan)}`);
  t.is(scans[0]!['Rows Removed by Filter'] ?? 0, 0, `${tag}: ${JSON.stringify(plan)}`);
  t.is(scans[0]!['Actual Rows'], 2, `${tag}: ${JSON.stringify(plan)}`);
  // …and that index covers pending deliveries only, on the column the statement orders by.
  const [index] = (await knex.raw(`select indexdef from pg_indexes where indexname = 'webhook_deliveries_sweep_due' and schemaname = current_schema()`)).rows as { indexdef: string }[];
  t.regex(index!.indexdef, /\(sweep_due_at\) WHERE \(\(status\)::text = 'pending'::text\)/, tag);
}

test.serial('deliveries backing off after a sweep are not read by the next sweeps (PostgreSQL)', async (t) => {
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/sweep-index'), events: ['*'] });
  t.is(hook.status, 201, JSON.stringify(hook.body));
  await backingOffRowsAreNotRead(t, stack.svc.runtime.db.knex, hook.body.id, 'pg');
});

test.serial('deliveries backing off after a sweep are not read by the next sweeps (embedded database)', async (t) => {
  const knex = embedded.knex;
  await knex('webhooks').insert({ id: 'wh_sweepindex', url: 'http://127.0.0.1:9/hook', events: JSON.stringify(['*']), secret_sealed: 'sealed' });
  await backingOffRowsAreNotRead(t, knex, 'wh_sweepindex', 'pglite');
});

test.serial('an attempt recorded while the sweep runs keeps its next attempt time; later sweeps leave it until then', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const deliveries = createDeliveriesStore(knex);
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/sweep-race'), events: ['*'] });
  t.is(hook.status, 201, JSON.stringify(hook.body));
  const id = 'whd_sweeprace0000000000000000';
  // Pending for ten minutes: a worker backlog, or a lost job.
  await knex('webhook_deliveries').insert({
    id,
    webhook_id: hook.body.id,
    event_id: 'evt_sweeprace000000000000000',
    event_type: 'model.updated',
    event_occurred_at: new Date(clock.now() - 10 * MINUTE),
    event_data: JSON.stringify({ model_id: 'm' }),
    queued: true,
    next_attempt_at: new Date(clock.now() - 10 * MINUTE),
  });
  const nextAttempt = new Date(clock.now() + 4 * 60 * MINUTE);

  // The bus the sweep sends through: while it sends this delivery's job, a worker (its original job)
  // makes attempt 1, fails with a 503 and records attempt 2 for four hours later.
  const sent: string[] = [];
  const bus: Bus = {
    ...stack.svc.runtime.bus,
    async send(queue, body, options) {
      t.is(queue, DELIVERY_QUEUE);
      if ((body as DeliveryJob).delivery_id !== id) return;
      sent.push(id);
      if (sent.length === 1) {
        const recorded = await deliveries.record({
          deliveryId: id,
          expectedAttempts: 0,
          retryCount: 0,
          statusCode: 503,
          durationMs: 5,
          outcome: 'retry',
          error: 'receiver answered 503',
          responseHead: null,
          attemptedAt: new Date(clock.now()),
          nextAttemptAt: nextAttempt,
        });
        t.true(recorded);
      }
    },
  };
  const logger = pino({ level: 'silent' });
  const sweep = () => sweepOverdue({ deliveries, bus, clock, logger, graceMs: GRACE });

  t.is(await sweep(), 1);
  const row = await knex('webhook_deliveries').where({ id }).first();
  t.is(row.status, 'pending');
  t.is(row.attempts, 1);
  t.is(new Date(row.next_attempt_at).getTime(), nextAttempt.getTime());

  // Every sweep up to the four hours (one a minute) leaves it alone: attempt 2 comes from its own job.
  for (let minute = 1; minute < 240; minute += 1) {
    clock.advance(MINUTE);
    await sweep();
  }
  t.deepEqual(sent, [id]);
  // Overdue by the grace period past its time: swept again.
  clock.advance(GRACE + 2 * MINUTE);
  t.is(await sweep(), 1);
  t.deepEqual(sent, [id, id]);
});

test.serial('a delivery swept again and again keeps its due time for the lag metric and the API, and its re-enqueues back off', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const deliveries = createDeliveriesStore(knex);
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/sweep-backlog'), events: ['*'] });
  t.is(hook.status, 201, JSON.stringify(hook.body));
  const id = 'whd_sweepbacklog0000000000000';
  const due = new Date(clock.now() - 60 * MINUTE);
  await knex('webhook_deliveries').insert({
    id,
    webhook_id: hook.body.id,
    event_id: 'evt_sweepbacklog000000000000',
    event_type: 'model.updated',
    event_occurred_at: due,
    event_data: JSON.stringify({ model_id: 'm' }),
    queued: true,
    next_attempt_at: due,
  });
  const start = clock.now();
  const sentAt: number[] = [];
  const bus: Bus = {
    ...stack.svc.runtime.bus,
    async send(_queue, body) {
      if ((body as DeliveryJob).delivery_id === id) sentAt.push((clock.now() - start) / MINUTE);
    },
  };
  const sweep = () => sweepOverdue({ deliveries, bus, clock, logger: pino({ level: 'silent' }), graceMs: GRACE });
  const registry = new Registry();
  registerWebhookMetrics(registry, { deliveries, clock });
  const lag = async () => (await registry.getSingleMetric('webhook_delivery_lag_seconds')!.get()).values[0]!.value;

  await sweep();
  t.deepEqual(sentAt, [0]);
  // Still due an hour ago, for the operator's lag metric and in the admin API.
  t.is(await lag(), 3600);
  const shown = await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${id}`);
  t.is(shown.body.next_attempt_at, Math.floor(due.getTime() / 1000));

  // Swept every minute for an hour while nothing attempts it: re-enqueued after 5, 10, 20 more minutes.
  for (let minute = 1; minute <= 60; minute += 1) {
    clock.advance(MINUTE);
    await sweep();
  }
  t.deepEqual(sentAt, [0, 6, 17, 38]);
  t.is(await lag(), 7200);
});
