import test from 'ava';
import { createDatabase, ManualClock, migrateAll, type Database, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import type { ProviderModelRow } from '../../services/llm-api/models/types.js';
import { createUsageMeters } from '../../services/llm-api/usage/meter.js';
import { usageCachedTokens, usageEstimated, usageRollupTables, usageTables } from '../../services/llm-api/usage/migrations.js';
import type { UsageRecord } from '../../services/llm-api/usage/recorder.js';
import { usageRoutes } from '../../services/llm-api/usage/routes.js';
import { insertUsageBatch } from '../../services/llm-api/usage/store.js';
import { listenKitApp } from '../helpers/kit-app.js';

// A model with a cached-prompt price charges the cached part of a prompt at that rate, so the cost
// an operator bills can only be checked against the report when the report says how many prompt
// tokens the provider served from its cache: the report, its CSV export and the raw records carry
// the provider's `prompt_tokens_details.cached_tokens` next to the prompt count.
let db: Database;
let server: RunningServer;
let base: string;
const SECRET = 'c'.repeat(40);
const users: UserDirectory = {
  resolve: async (claims) => ({ ...claims, isAdmin: claims.userId === 'user_admin', isGuest: false }),
  invalidate: () => {},
};
const PROMPT = { unit: 'per_1m_prompt_tokens', amount_micro_usd: 3_000_000, currency: 'USD' };
const CACHED = { unit: 'per_1k_cached_prompt_tokens', amount_micro_usd: 300, currency: 'USD' };
const pm = { id: 'pm_1', provider_id: 'prov_1', model_public_id: 'm', pricing: { lines: [PROMPT, CACHED] } } as unknown as ProviderModelRow;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_cached_test', migrations: [usageTables, usageRollupTables, usageEstimated, usageCachedTokens] }]);
  ({ server, base } = await listenKitApp({ name: 'usage-cached', gatewaySecret: SECRET, users, routeTable: usageRoutes({ usageReports: { knex: db.knex } }) }));
  const records: UsageRecord[] = [];
  const meters = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock: new ManualClock(Date.parse('2026-11-20T12:00:00Z')), elapsed: () => 0 });
  const send = (userId: string, usage: Record<string, unknown>) => {
    const meter = meters.open({ requestId: `r_${records.length}`, userId, authMethod: 'apikey', apiKeyId: null, model: 'm', stream: false, metadata: null, startedAt: 0 });
    meter.routed({ pm, endpoint: 'http://p/v1', tries: 1 });
    meter.close({ status: 200, outcome: 'ok', usage: usage as never });
  };
  send('user_a', { prompt_tokens: 1000, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 800 } }); // 200 × 3 + 800 × 0.3 = 840
  send('user_a', { prompt_tokens: 100, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 5000 } }); // more than the prompt: the whole prompt, 30
  send('user_a', { prompt_tokens: 100, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 'many' } }); // not a count: none, 300
  send('user_b', { prompt_tokens: 10, completion_tokens: 0 }); // 30
  await insertUsageBatch(db.knex, records);
});
test.after.always(async () => {
  await server?.close(100);
  await db?.close();
});

async function get(path: string, userId = 'user_admin') {
  const res = await fetch(base + path, { headers: { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': userId } });
  return { status: res.status, text: await res.text() };
}

test('the raw record keeps the cached prompt tokens it was priced with', async (t) => {
  const rows = await db.knex('llm_usage').orderBy('id').select('prompt_tokens', 'cached_tokens', 'cost_micro_usd');
  t.deepEqual(
    rows.map((r) => [r.prompt_tokens, r.cached_tokens, Number(r.cost_micro_usd)]),
    [
      [1000, 800, 840],
      [100, 100, 30],
      [100, 0, 300],
      [10, 0, 30],
    ],
  );
});

test('the report and the export give the cached prompt tokens by group, and the caller their own', async (t) => {
  const report = JSON.parse((await get('/v1/admin/usage?group_by=user')).text);
  t.deepEqual(
    report.data.map((r: any) => [r.user_id, r.prompt_tokens, r.cached_tokens, r.cost_micro_usd]),
    [
      ['user_a', 1200, 900, 1170],
      ['user_b', 10, 0, 30],
    ],
  );
  const own = JSON.parse((await get('/v1/usage', 'user_a')).text);
  t.like(own.data[0], { prompt_tokens: 1200, cached_tokens: 900 });
  const csv = (await get('/v1/admin/usage/export?format=csv&group_by=user')).text.trim().split('\n');
  const header = csv[0]!.split(',');
  t.true(header.includes('cached_tokens'));
  const cell = (line: string, column: string) => line.split(',')[header.indexOf(column)];
  t.deepEqual(
    csv.slice(1).map((line) => [cell(line, 'user_id'), cell(line, 'cached_tokens')]),
    [
      ['user_a', '900'],
      ['user_b', '0'],
    ],
  );
});
