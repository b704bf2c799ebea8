import test from 'ava';
import type { Knex } from 'knex';
import { createDatabase, ManualClock, migrateAll, type Database, type Principal } from '../../../services/kit/index.js';
import type { ProviderModelRow } from '../../../services/llm-api/models/types.js';
import { readSpend } from '../../../services/llm-api/usage/budgets-store.js';
import { admitRequest, writeSpendLimits, type SpendDeps } from '../../../services/llm-api/usage/budgets.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import { spendHoldExpiry, spendHolds, spendSettledCount, spendTables, usageCachedTokens, usageEstimated, usageRollupTables, usageTables } from '../../../services/llm-api/usage/migrations.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';
import { insertUsageBatch } from '../../../services/llm-api/usage/store.js';
import { waitFor } from '../../helpers/wait.js';

// Budgets over time, through admission, the usage meter and the daily rollup as the chat path uses
// them: a budget whose period changes, a request that crosses midnight, and a settlement retried
// after its commit went through.
let db: Database;
test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'budget_periods_test', migrations: [usageTables, usageRollupTables, usageEstimated, spendTables, spendSettledCount, usageCachedTokens, spendHolds, spendHoldExpiry] }]);
});
test.after.always(async () => {
  await db?.close();
});

const principal = (keyId: string): Principal => ({ userId: `user_of_${keyId}`, subject: keyId, email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false, apiKeyId: keyId });
const pricedAt = (cost: number) => ({ id: 'pmdl_1', provider_id: 'prov_1', pricing: { lines: [{ unit: 'per_request', amount_micro_usd: cost }] } }) as unknown as ProviderModelRow;
const quiet = { error() {} } as unknown as SpendDeps['logger'];

/**
 * One chat request as the chat path makes it: admitted at the clock's time, metered, `runMs`
 * later answered at `cost`, its record written to the raw table and the rollup.
 */
async function request(deps: SpendDeps, clock: ManualClock, keyId: string, cost: number, runMs = 1000): Promise<UsageRecord> {
  const records: UsageRecord[] = [];
  const ticket = await admitRequest(deps, principal(keyId), 'm');
  const meter = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock }).open({
    ticket,
    requestId: `req_${keyId}_${clock.now()}`,
    userId: `user_of_${keyId}`,
    authMethod: 'apikey',
    apiKeyId: keyId,
    model: 'm',
    stream: true,
    metadata: null,
    startedAt: performance.now(),
  });
  meter.routed({ pm: pricedAt(cost), endpoint: 'http://p/v1', tries: 1 });
  clock.advance(runMs);
  await meter.close({ status: 200, outcome: 'ok', usage: { prompt_tokens: 10, completion_tokens: 5 } });
  await insertUsageBatch(db.knex, records);
  return records[0]!;
}

const refusal = async (deps: SpendDeps, keyId: string) => {
  const error = await Promise.resolve()
    .then(() => admitRequest(deps, principal(keyId), 'm'))
    .then(
      () => null,
      (e: { status?: number; code?: string }) => e,
    );
  return error && { status: error.status, code: error.code };
};

test('a daily budget changed to monthly counts every day of the month so far, not only the 1st', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-01T10:00:00Z'));
  const deps: SpendDeps = { knex: db.knex, clock, logger: quiet };
  await writeSpendLimits(db.knex, clock, 'key', 'key_to_month', { budget_period: 'day', max_budget_micro_usd: 10_000 });
  await request(deps, clock, 'key_to_month', 4000);
  clock.set(Date.parse('2026-12-02T10:00:00Z'));
  await request(deps, clock, 'key_to_month', 4000);

  await writeSpendLimits(db.knex, clock, 'key', 'key_to_month', { budget_period: 'month', max_budget_micro_usd: 6000 });
  t.deepEqual(await refusal(deps, 'key_to_month'), { status: 429, code: 'insufficient_quota' }, '8000 spent this month, over 6000');
  t.is(Number((await readSpend(db.knex, 'key', 'key_to_month', '2026-12-01'))?.spent_micro_usd), 8000);
});

test('a monthly budget changed to daily counts what was spent today under the monthly one', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-01T10:00:00Z'));
  const deps: SpendDeps = { knex: db.knex, clock, logger: quiet };
  await writeSpendLimits(db.knex, clock, 'key', 'key_to_day', { budget_period: 'month', max_budget_micro_usd: 100_000 });
  await request(deps, clock, 'key_to_day', 4000);
  clock.set(Date.parse('2026-12-02T10:00:00Z'));
  await request(deps, clock, 'key_to_day', 4000);

  await writeSpendLimits(db.knex, clock, 'key', 'key_to_day', { budget_period: 'day', max_budget_micro_usd: 3000 });
  t.deepEqual(await refusal(deps, 'key_to_day'), { status: 429, code: 'insufficient_quota' }, '4000 spent today, over 3000');
  t.is(Number((await readSpend(db.knex, 'key', 'key_to_day', '2026-12-02'))?.spent_micro_usd), 4000);

  // Back to monthly the same day: the month's counter has not seen today's spend under the daily budget.
  clock.advance(60_000);
  await writeSpendLimits(db.knex, clock, 'key', 'key_to_day', { budget_period: 'day', max_budget_micro_usd: 100_000 });
  await request(deps, clock, 'key_to_day', 1000);
  await writeSpendLimits(db.knex, clock, 'key', 'key_to_day', { budget_period: 'month', max_budget_micro_usd: 100_000 });
  t.is(Number((await readSpend(db.knex, 'key', 'key_to_day', '2026-12-01'))?.spent_micro_usd), 9000);
});

test('a request that crosses midnight (UTC) is reported on the day its budget charged it to', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-06T23:59:50Z'));
  const deps: SpendDeps = { knex: db.knex, clock, logger: quiet };
  await writeSpendLimits(db.knex, clock, 'key', 'key_midnight', { max_budget_micro_usd: 10_000 });
  const record = await request(deps, clock, 'key_midnight', 1500, 60_000); // ends at 00:00:50
  t.is(record.created_at.toISOString(), '2026-12-06T23:59:50.000Z', 'the record carries the instant the request was charged at');
  const charged = await db.knex('llm_spend_counters').where({ scope: 'key', scope_id: 'key_midnight' }).select('period_start', 'spent_micro_usd');
  const reported = await db.knex('llm_usage_daily').where({ api_key_id: 'key_midnight' }).select('day', 'cost_micro_usd');
  const day = (value: Date | string) => (value instanceof Date ? value.toISOString() : String(value)).slice(0, 10);
  t.deepEqual(
    charged.map((row) => [day(row.period_start), Number(row.spent_micro_usd)]),
    [['2026-12-06', 1500]],
  );
  t.deepEqual(
    reported.map((row) => [day(row.day), Number(row.cost_micro_usd)]),
    [['2026-12-06', 1500]],
  );
});

test('a settlement whose commit went through but whose answer was lost is retried without counting twice', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-07T10:00:00Z'));
  let settles = 0;
  // The first settlement statement is committed, then its connection "drops" before the answer.
  const lossy = new Proxy(db.knex, {
    get(target, prop, receiver) {
      if (prop !== 'raw') return Reflect.get(target, prop, receiver);
      return async (sql: string, bindings: unknown) => {
        const result = await target.raw(sql, bindings as Knex.RawBinding);
        if (/tokens = (c\.)?tokens \+/.test(sql) && ++settles === 1) throw Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
        return result;
      };
    },
  });
  const errors: string[] = [];
  const deps: SpendDeps = { knex: lossy, clock, logger: { error: ((_fields: object, message: string) => void errors.push(message)) as SpendDeps['logger']['error'], warn: ((_fields: object, message: string) => void errors.push(message)) as SpendDeps['logger']['warn'] } };
  await writeSpendLimits(db.knex, clock, 'key', 'key_lost_answer', { max_budget_micro_usd: 10_000 });
  const ticket = await admitRequest(deps, principal('key_lost_answer'), 'm');
  await ticket!.settle({ cost: 1500, tokens: 40 });
  await waitFor(() => settles >= 2, 10_000, 'the settlement retried');
  const counter = await readSpend(db.knex, 'key', 'key_lost_answer', '2026-12-07');
  t.deepEqual([Number(counter.spent_micro_usd), Number(counter.tokens), Number(counter.settled), counter.in_flight], [1500, 40, 1, 0]);
  t.deepEqual(errors, []);
});

test('a slot held by a request whose process died is given back after its lease, not at the end of the period', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-08T10:00:00Z'));
  // Requests run at most a minute here: a slot is held for that plus a minute.
  const deps: SpendDeps = { knex: db.knex, clock, logger: quiet, maxRequestMs: 60_000 };
  await writeSpendLimits(db.knex, clock, 'key', 'key_died', { max_budget_micro_usd: 10_000 });
  t.truthy(await admitRequest(deps, principal('key_died'), 'm'), 'admitted, then its process died: never settled');
  t.deepEqual(await refusal(deps, 'key_died'), { status: 429, code: 'budget_busy' }, 'its slot still counts');
  clock.advance(119_000);
  t.deepEqual(await refusal(deps, 'key_died'), { status: 429, code: 'budget_busy' }, 'still within its lease');
  clock.advance(3 * 120_000);
  t.truthy(await admitRequest(deps, principal('key_died'), 'm'), 'the dead slot no longer counts');
});
