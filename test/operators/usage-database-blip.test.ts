import test from 'ava';
import knexFactory from 'knex';
import { createDatabase, ManualClock, migrateAll, type Database, type Logger, type Principal } from '../../services/kit/index.js';
import { upsertSpendLimits } from '../../services/llm-api/usage/budgets-store.js';
import { admitRequest, type SpendDeps } from '../../services/llm-api/usage/budgets.js';
import { spendHoldExpiry, spendHolds, spendSettledCount, spendTables, usageCachedTokens, usageEstimated, usageRollupTables, usageTables } from '../../services/llm-api/usage/migrations.js';
import { createUsageRecorder, type UsageRecord } from '../../services/llm-api/usage/recorder.js';
import { dropSchema, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';
import { usageRecord } from '../helpers/usage-record.js';

// What an operator bills from must survive a database blip: a budget counter's settlement when a
// request ends, and the usage records still queued when the process stops. Real PostgreSQL behind
// a TCP proxy that cuts every connection (and refuses new ones) until it is resumed.
const schema = uniqueName('usage_blip');
const clock = new ManualClock(Date.parse('2026-12-07T10:00:00Z'));
let db: Database;
let proxy: FaultProxy;
let faulty: knexFactory.Knex;
const logged: string[] = [];

test.before(async () => {
  db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema });
  await migrateAll(db.knex, [{ owner: 'budget_settle_test', migrations: [usageTables, usageRollupTables, usageEstimated, spendTables, spendSettledCount, usageCachedTokens, spendHolds, spendHoldExpiry] }]);
  proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(TEST_DATABASE_URL).port || 5432) });
  const url = new URL(TEST_DATABASE_URL);
  url.port = String(proxy.port);
  faulty = knexFactory({ client: 'pg', connection: url.toString(), searchPath: [schema], pool: { min: 0, max: 2 }, acquireConnectionTimeout: 2000 });
});

test.after.always(async () => {
  await faulty?.destroy();
  await proxy?.close();
  await db?.close();
  await dropSchema(schema);
});

const principal = (userId: string, apiKeyId: string): Principal => ({ userId, subject: userId, email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false, apiKeyId });

test.serial('a request that ends while the database is unreachable is still charged to its budgets once it is back', async (t) => {
  const deps: SpendDeps = { knex: faulty, clock, logger: { error: ((_fields: object, message: string) => void logged.push(message)) as SpendDeps['logger']['error'], warn: ((_fields: object, message: string) => void logged.push(message)) as SpendDeps['logger']['warn'] } };
  const at = new Date(clock.now());
  await upsertSpendLimits(db.knex, { scope: 'key', scopeId: 'key_blip' }, { max_budget_micro_usd: 10_000 }, at);
  await upsertSpendLimits(db.knex, { scope: 'user', scopeId: 'user_blip' }, { max_tokens: 1_000 }, at);
  const ticket = await admitRequest(deps, principal('user_blip', 'key_blip'), 'any-model');
  t.truthy(ticket);

  proxy.cut();
  await ticket!.settle({ cost: 1_500, tokens: 40 }); // never throws: the answer has already gone out
  proxy.resume();

  const counters = () => db.knex('llm_spend_counters').where({ period_start: '2026-12-07' }).orderBy('scope').select('scope', 'spent_micro_usd', 'tokens', 'in_flight', 'settled');
  const settled = await waitFor(async () => {
    const rows = await counters();
    return rows.length === 2 && rows.every((row) => row.in_flight === 0) ? rows : null;
  }, 20_000, 'both counters settled after the outage');
  t.deepEqual(
    settled.map((row) => [row.scope, Number(row.spent_micro_usd), Number(row.tokens), row.in_flight, Number(row.settled)]),
    [
      ['key', 1_500, 40, 0, 1],
      ['user', 1_500, 40, 0, 1],
    ],
  );
  t.deepEqual(logged, [], 'nothing was given up');
});

test.serial('usage records still queued at shutdown are written when the database comes back within a few seconds', async (t) => {
  let failures = 0;
  const errors: string[] = [];
  const logger = {
    warn: (_fields: unknown, message: string) => {
      // The kit's own stop tries three times back to back: come back only after that.
      if (message.includes('will retry') && ++failures === 3) proxy.resume();
    },
    error: (_fields: unknown, message: string) => void errors.push(message),
    info() {},
    debug() {},
  } as unknown as Logger;
  const recorder = createUsageRecorder({ knex: faulty, logger, flushMs: 60_000, batchSize: 500 });
  recorder.record(shutdownRecord('req_at_shutdown'));
  proxy.cut();
  await recorder.stop();
  t.true(failures >= 3, 'the database was away when the stop began');
  const row = await db.knex('llm_usage').where({ request_id: 'req_at_shutdown' }).first();
  t.is(Number(row?.cost_micro_usd), 700);
  const daily = await db.knex('llm_usage_daily').where({ user_id: 'user_shutdown' }).first();
  t.is(Number(daily?.requests), 1);
  t.deepEqual(errors, [], 'nothing was given up');
});

const shutdownRecord = (requestId: string): UsageRecord =>
  usageRecord({ request_id: requestId, user_id: 'user_shutdown', api_key_id: 'key_shutdown', cost_micro_usd: 700, created_at: new Date('2026-12-07T10:00:00Z') });
