import test from 'ava';
import type { Knex } from 'knex';
import { createDeliveriesStore, webhooksMigrationSet } from '../../domains/webhooks/index.js';
import { pruneEndedStatement } from '../../domains/webhooks/deliveries-store.js';
import { openTestRuntime } from '../helpers/env.js';
import { analyzeOwnTables, assertIndexBacked, batchInsert, explainQuery } from '../helpers/query-plans.js';

// The hourly retention pass finds ended deliveries by when they last changed. At volume (40,000
// deliveries, most pending or recently ended, bulk-inserted, then ANALYZE of this file's schema) the
// statement the store really sends reads them through the partial index on ended rows, never a
// sequential scan of the table, and deletes in bounded batches. No timing is measured.
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 11, 8);
const TOTAL = 40_000;
const OLD = 1_500; // ended before the retention: more than one batch

let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let knex: Knex;

test.before(async () => {
  runtime = await openTestRuntime({ migrations: [webhooksMigrationSet], bus: 'pg' });
  knex = runtime.db.knex;
  await knex('webhooks').insert({ id: 'wh_retention', url: 'https://example.com/hook', events: JSON.stringify(['*']), secret_sealed: 'sealed' });
  const rows: Record<string, unknown>[] = [];
  for (let i = 0; i < TOTAL; i++) {
    const old = i < OLD;
    const status = old ? 'delivered' : i % 2 === 0 ? 'pending' : ['delivered', 'failed', 'dead'][i % 3];
    const at = new Date(old ? NOW - 40 * DAY - i * 1000 : NOW - (i % 20) * DAY);
    rows.push({
      id: `whd_${String(i).padStart(6, '0')}`,
      webhook_id: 'wh_retention',
      event_id: `evt_${i}`,
      event_type: 'conversation.created',
      event_occurred_at: at,
      event_data: JSON.stringify({ i }),
      status,
      created_at: at,
      updated_at: at,
    });
  }
  await batchInsert(knex, 'webhook_deliveries', rows);
  await analyzeOwnTables(knex);
});
test.after.always(async () => {
  await runtime?.dispose();
});

test.serial('the retention delete reads ended deliveries through their updated_at index, not a table scan', async (t) => {
  const plan = await explainQuery(knex, pruneEndedStatement(knex, new Date(NOW - 30 * DAY), 1000));
  assertIndexBacked(t, plan, { webhook_deliveries: ['webhook_deliveries_ended_updated_at'] });
});

test.serial('the retention pass deletes every ended delivery past the retention, in batches, and nothing else', async (t) => {
  const before = await knex('webhook_deliveries').count({ n: '*' }).first();
  const removed = await createDeliveriesStore(knex).pruneEnded(new Date(NOW - 30 * DAY), 400);
  t.is(removed, OLD);
  const after = await knex('webhook_deliveries').count({ n: '*' }).first();
  t.is(Number(after!.n), Number(before!.n) - OLD);
  t.is(Number((await knex('webhook_deliveries').where('updated_at', '<', new Date(NOW - 30 * DAY)).count({ n: '*' }).first())!.n), 0);
});
