import test from 'ava';
import { createDatabase, migrateAll, type MigrationSet } from '../../../services/kit/index.js';
import { usageCachedTokens, usageEstimated, usageRawKeyOnly, usageRollupTables, usageTables } from '../../../services/llm-api/usage/migrations.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';
import { insertUsageBatch } from '../../../services/llm-api/usage/store.js';
import { dropSchema, TEST_DATABASE_URL, uniqueName } from '../../helpers/env.js';

// The raw usage records are written for every chat completion and read by nothing in the platform
// (the reports read the daily rollup), so their table keeps only its primary key: a database
// migrated before loses the two secondary indexes, and a batch still lands in both tables.
const schema = uniqueName('usage_raw');
test.after.always(() => dropSchema(schema));

const record = (i: number, at: Date): UsageRecord => ({
  request_id: `req_${i}`,
  user_id: 'usr_1',
  auth_method: 'api_key',
  api_key_id: 'key_1',
  model: 'gpt-4o-mini',
  provider_id: 'prov_1',
  provider_model_id: 'pm_1',
  endpoint: 'chat.completions',
  stream: false,
  prompt_tokens: 10,
  completion_tokens: 5,
  reasoning_tokens: 0,
  total_tokens: 15,
  cost_micro_usd: 7,
  latency_ms: 20,
  ttfb_ms: 12,
  attempts: 1,
  status: 200,
  outcome: 'ok',
  metadata: null,
  created_at: at,
  project_id: null,
});

test('the raw usage table keeps only its primary key, and a batch still reaches the rows and the daily rollup', async (t) => {
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema });
  t.teardown(() => db.close());
  const indexes = async () =>
    (await db.knex.raw("select indexname from pg_indexes where schemaname = ? and tablename = 'llm_usage' order by 1", [schema])).rows.map((r: { indexname: string }) => r.indexname);
  const before: MigrationSet = { owner: 'llm_api', migrations: [usageTables, usageRollupTables] };
  await migrateAll(db.knex, [before]);
  t.deepEqual(await indexes(), ['llm_usage_model_created_at_index', 'llm_usage_pkey', 'llm_usage_user_id_created_at_index']);

  await migrateAll(db.knex, [{ owner: 'llm_api', migrations: [usageTables, usageRollupTables, usageRawKeyOnly, usageEstimated, usageCachedTokens] }]);
  t.deepEqual(await indexes(), ['llm_usage_pkey']);

  const at = new Date('2026-11-30T23:59:59.999Z');
  await insertUsageBatch(db.knex, [record(1, at), record(2, at)]);
  const raw = await db.knex('llm_usage').select('request_id', 'created_at').orderBy('request_id');
  t.deepEqual(
    raw.map((r: { request_id: string; created_at: Date }) => [r.request_id, new Date(r.created_at).toISOString()]),
    [
      ['req_1', '2026-11-30T23:59:59.999Z'],
      ['req_2', '2026-11-30T23:59:59.999Z'],
    ],
  );
  // One rollup row, on the records' UTC day (one millisecond before midnight).
  const daily = await db.knex.raw('select day::text as day, requests::int as requests, cost_micro_usd::int as cost from llm_usage_daily');
  t.deepEqual(daily.rows, [{ day: '2026-11-30', requests: 2, cost: 14 }]);
});

test('usage_estimated: rows written before the column are provider counts (false); a record says which it is', async (t) => {
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema: `${schema}_est` });
  t.teardown(async () => {
    await db.close();
    await dropSchema(`${schema}_est`);
  });
  await migrateAll(db.knex, [{ owner: 'llm_api', migrations: [usageTables, usageRollupTables, usageRawKeyOnly] }]);
  await db.knex('llm_usage').insert({ request_id: 'req_old', model: 'm', latency_ms: 1, status: 200, outcome: 'ok', created_at: new Date() });
  await migrateAll(db.knex, [{ owner: 'llm_api', migrations: [usageTables, usageRollupTables, usageRawKeyOnly, usageEstimated, usageCachedTokens] }]);
  const at = new Date('2026-12-06T12:00:00Z');
  await insertUsageBatch(db.knex, [record(1, at), { ...record(2, at), outcome: 'client_closed', usage_estimated: true }]);
  const rows = await db.knex('llm_usage').select('request_id', 'usage_estimated').orderBy('request_id');
  t.deepEqual(rows, [
    { request_id: 'req_1', usage_estimated: false },
    { request_id: 'req_2', usage_estimated: true },
    { request_id: 'req_old', usage_estimated: false },
  ]);
});
