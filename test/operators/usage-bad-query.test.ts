import test from 'ava';
import { createDatabase, migrateAll, type Database, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import { usageCachedTokens, usageEstimated, usageRollupTables, usageTables } from '../../services/llm-api/usage/migrations.js';
import type { UsageRecord } from '../../services/llm-api/usage/recorder.js';
import { usageRoutes } from '../../services/llm-api/usage/routes.js';
import { insertUsageBatch } from '../../services/llm-api/usage/store.js';
import { listenKitApp } from '../helpers/kit-app.js';
import { usageRecord } from '../helpers/usage-record.js';

// A filter of the usage reports given without a value (`key_id=`, as a script whose variable is
// empty sends it) is a 400 naming the field, as on the recent-requests log: it used to match the
// rollup's "none" ('') and answer another customer's usage, e.g. every request made without a key.
let db: Database;
let server: RunningServer;
let base: string;
const SECRET = 'q'.repeat(40);
const users: UserDirectory = { resolve: async (claims) => ({ ...claims, isAdmin: claims.userId === 'user_admin', isGuest: false }), invalidate: () => {} };

const record = (over: Partial<UsageRecord>): UsageRecord => usageRecord({ auth_method: 'jwt', ...over });

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_bad_query_test', migrations: [usageTables, usageRollupTables, usageEstimated, usageCachedTokens] }]);
  ({ server, base } = await listenKitApp({ name: 'usage-bad-query', gatewaySecret: SECRET, users, routeTable: usageRoutes({ usageReports: { knex: db.knex } }) }));
  // A request made with a bearer token (no key), in no project.
  await insertUsageBatch(db.knex, [record({})]);
});
test.after.always(async () => {
  await server?.close(100);
  await db?.close();
});

async function get(path: string, userId = 'user_admin') {
  const res = await fetch(base + path, { headers: { 'x-gateway-token': SECRET, 'x-auth-method': 'jwt', 'x-user-id': userId } });
  return { status: res.status, body: (await res.json()) as any };
}

test('an empty filter is a 400 naming it on every report, not the usage of requests without one', async (t) => {
  for (const field of ['user_id', 'key_id', 'model', 'provider_id', 'project_id']) {
    for (const path of [`/v1/admin/usage?${field}=`, `/v1/admin/usage/export?format=csv&${field}=`, `/v1/usage?${field}=`]) {
      const { status, body } = await get(path, path.startsWith('/v1/usage') ? 'user_a' : 'user_admin');
      t.is(status, 400, path);
      t.like(body.error, { type: 'invalid_request_error', param: field }, path);
    }
  }
  // The same filters with a value still answer.
  const { status, body } = await get('/v1/admin/usage?user_id=user_a&model=m&provider_id=prov_1');
  t.is(status, 200);
  t.like(body.data[0], { requests: 1, cost_micro_usd: 100 });
});
