import test from 'ava';
import { createDatabase, createLogger, ManualClock, migrateAll, type Database, type Principal, type RunningServer, type UserDirectory } from '../../../services/kit/index.js';
import type { ProviderModelRow } from '../../../services/llm-api/models/types.js';
import { admitRequest, setSpendLimits, type SpendDeps } from '../../../services/llm-api/usage/budgets.js';
import { readSpend } from '../../../services/llm-api/usage/budgets-store.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import { spendHoldExpiry, spendHolds, spendSettledCount, spendTables, usageCachedTokens, usageEstimated, usageRollupTables, usageTables } from '../../../services/llm-api/usage/migrations.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';
import { usageRoutes } from '../../../services/llm-api/usage/routes.js';
import { insertUsageBatch } from '../../../services/llm-api/usage/store.js';
import { listenKitApp } from '../../helpers/kit-app.js';
import { usageRecord } from '../../helpers/usage-record.js';

// Usage as an operator bills from it: what a request is charged, what a budget admits, and what
// the reports and the export answer for the ranges and failures an operator runs into.
let db: Database;
let server: RunningServer;
let base: string;
const SECRET = 'u'.repeat(40);
const users: UserDirectory = {
  resolve: async (claims) => ({ ...claims, isAdmin: claims.userId === 'user_admin', isGuest: false }),
  invalidate: () => {},
};

const record = usageRecord;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_audit_test', migrations: [usageTables, usageRollupTables, usageEstimated, spendTables, spendSettledCount, usageCachedTokens, spendHolds, spendHoldExpiry] }]);
  ({ server, base } = await listenKitApp({ name: 'usage-audit', gatewaySecret: SECRET, users, routeTable: usageRoutes({ usageReports: { knex: db.knex } }) }));
  await insertUsageBatch(db.knex, [
    record({ user_id: 'user_a', created_at: new Date('2026-11-20T23:59:59Z') }),
    record({ user_id: 'user_a', created_at: new Date('2026-11-21T00:00:00Z') }),
    record({ user_id: 'user_b', created_at: new Date('2026-11-21T10:00:00Z') }),
  ]);
});
test.after.always(async () => {
  await server?.close(100);
  await db?.close();
});

const as = (userId: string) => ({ 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': userId });
async function get(path: string, userId = 'user_admin', at = base) {
  const res = await fetch(at + path, { headers: as(userId) });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), text, body: res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

test('a range that ends before it starts is a 400 naming `to` on every report, not an empty report', async (t) => {
  for (const path of ['/v1/usage', '/v1/admin/usage', '/v1/admin/usage/export']) {
    const reversed = await get(`${path}?from=2026-11-21&to=2026-11-20`);
    t.is(reversed.status, 400, path);
    t.like(reversed.body?.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'to' }, path);
  }
  // Both bounds are included: from = to is that one UTC day, midnight on its side.
  const day = await get('/v1/admin/usage?from=2026-11-21&to=2026-11-21&group_by=user');
  t.is(day.status, 200);
  t.deepEqual(
    day.body.data.map((r: { user_id: string; requests: number }) => [r.user_id, r.requests]),
    [
      ['user_a', 1],
      ['user_b', 1],
    ],
  );
});

test('a group_by naming no dimension is a 400 naming group_by on every report, whatever the name (constructor, toString, __proto__)', async (t) => {
  for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'day,valueOf']) {
    for (const path of ['/v1/usage', '/v1/admin/usage', '/v1/admin/usage/export']) {
      const answer = await get(`${path}?group_by=${encodeURIComponent(name)}`);
      t.is(answer.status, 400, `${path} ${name}`);
      t.like(answer.body?.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'group_by' }, `${path} ${name}`);
    }
  }
});

test('an export whose database cannot answer is an error status, not a 200 CSV cut short', async (t) => {
  const down = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(down.knex, [{ owner: 'usage_audit_down', migrations: [usageTables, usageRollupTables] }]);
  await down.knex.schema.dropTable('llm_usage_daily'); // every read of the rollup now fails
  const app = await listenKitApp({ name: 'usage-audit-down', gatewaySecret: SECRET, users, routeTable: usageRoutes({ usageReports: { knex: down.knex } }) });
  try {
    const exported = await get('/v1/admin/usage/export?format=csv&group_by=day', 'user_admin', app.base);
    t.is(exported.status, 500);
    t.is(exported.body?.error?.type, 'internal_error');
    t.false(exported.text.startsWith('day,'), 'no CSV header');
  } finally {
    await app.server.close(100);
    await down.close();
  }
});

const PER_REQUEST = 500;
const pm = { id: 'pm_1', provider_id: 'prov_1', pricing: { lines: [{ unit: 'per_request', amount_micro_usd: PER_REQUEST, currency: 'USD' }, { unit: 'per_1m_prompt_tokens', amount_micro_usd: 3_000_000, currency: 'USD' }] } } as unknown as ProviderModelRow;

test('a request that failed without usage is recorded at no cost, as the report promises; one with usage is priced', (t) => {
  const records: UsageRecord[] = [];
  const meters = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock: new ManualClock(1_700_000_000_000), elapsed: () => 0 });
  const open = () => meters.open({ requestId: 'r', userId: 'user_1', authMethod: 'apikey', apiKeyId: null, model: 'm', stream: false, metadata: null, startedAt: 0 });
  // The provider was reached, then its answer broke off (502) or the client left (499): nothing reported.
  for (const status of [502, 499]) {
    const meter = open();
    meter.routed({ pm, endpoint: 'http://p/v1', tries: 1 });
    meter.close({ status, outcome: status === 499 ? 'client_closed' : 'upstream_error' });
  }
  // A stream that failed with the gateway's estimate, and an answer without a usage object: charged.
  const estimated = open();
  estimated.routed({ pm, endpoint: 'http://p/v1', tries: 1 });
  estimated.close({ status: 502, outcome: 'stream_error', usage: { prompt_tokens: 1000, completion_tokens: 3 }, estimated: true });
  const answered = open();
  answered.routed({ pm, endpoint: 'http://p/v1', tries: 1 });
  answered.close({ status: 200, outcome: 'ok', usage: null });
  t.deepEqual(
    records.map((r) => r.cost_micro_usd),
    [0, 0, PER_REQUEST + 3000, PER_REQUEST],
  );
});

test('cached prompt tokens are charged at the model\'s cached rate when it has one, at the prompt rate otherwise', (t) => {
  const records: UsageRecord[] = [];
  const meters = createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock: new ManualClock(1_700_000_000_000), elapsed: () => 0 });
  const priced = (lines: unknown[], usage: Record<string, unknown>) => {
    const meter = meters.open({ requestId: 'r', userId: 'user_1', authMethod: 'apikey', apiKeyId: null, model: 'm', stream: false, metadata: null, startedAt: 0 });
    meter.routed({ pm: { ...pm, pricing: { lines } } as ProviderModelRow, endpoint: 'http://p/v1', tries: 1 });
    meter.close({ status: 200, outcome: 'ok', usage: usage as any });
    return records.at(-1)!.cost_micro_usd;
  };
  const prompt = { unit: 'per_1m_prompt_tokens', amount_micro_usd: 3_000_000, currency: 'USD' };
  const cachedRate = { unit: 'per_1k_cached_prompt_tokens', amount_micro_usd: 300, currency: 'USD' };
  // 1000 prompt tokens, 800 of them cached: 200 at 3 µ$ and 800 at 0.3 µ$.
  t.is(priced([prompt, cachedRate], { prompt_tokens: 1000, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 800 } }), 600 + 240);
  t.is(priced([prompt], { prompt_tokens: 1000, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 800 } }), 3000, 'no cached rate: every prompt token at the prompt rate');
  t.is(priced([prompt, cachedRate], { prompt_tokens: 1000, completion_tokens: 0 }), 3000, 'nothing cached');
  t.is(priced([prompt, cachedRate], { prompt_tokens: 1000, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 5000 } }), 300, 'a cached count above the prompt counts as the whole prompt');
  t.is(priced([prompt, cachedRate], { prompt_tokens: 1000, completion_tokens: 0, prompt_tokens_details: { cached_tokens: -5 } }), 3000, 'a cached count that is not one is ignored');
});

test('a request that ended without using anything does not let the next ones of the period run side by side', async (t) => {
  const clock = new ManualClock(Date.parse('2026-12-07T10:00:00Z'));
  const deps: SpendDeps = { knex: db.knex, clock, logger: createLogger({ level: 'silent', name: 'usage-audit' }) };
  const principal: Principal = { userId: 'user_budget', subject: 'user_budget', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false };
  await setSpendLimits(deps, 'user', 'user_budget', { max_budget_micro_usd: 10_000 });
  // The period's first request fails before the provider answers (or its input is refused): it settles at 0.
  const failed = await admitRequest(deps, principal, 'm');
  await failed!.settle({ cost: 0, tokens: 0 });
  // Nothing is known yet about what a request costs: the next ones must still go one at a time.
  const first = await admitRequest(deps, principal, 'm');
  t.truthy(first);
  const second = await Promise.resolve()
    .then(() => admitRequest(deps, principal, 'm'))
    .then(
    () => 'admitted',
    (error: { code?: string }) => error.code,
  );
  t.is(second, 'budget_busy');
  await first!.settle({ cost: 9_000, tokens: 100 });
  t.like(await readSpend(db.knex, 'user', 'user_budget', '2026-12-07'), { in_flight: 0 });
  t.is(Number((await readSpend(db.knex, 'user', 'user_budget', '2026-12-07')).spent_micro_usd), 9_000);
});
