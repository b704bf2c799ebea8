import test from 'ava';
import { randomBase62 } from '../../../services/kit/index.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { assertError, call, identityHeaders, identityOf } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

// BOOTSTRAP_ADMIN_API_KEY: the operator's first way in on a fresh install.
const KEY = `sk_${randomBase62(32)}`;
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { env: { BOOTSTRAP_ADMIN_API_KEY: KEY } });
});
test.after.always(() => svc?.close());

test.serial('at start an admin user holds the key: enterprise tier, no limits of its own', async (t) => {
  const v = await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: KEY } });
  t.is(v.status, 200, JSON.stringify(v.body));
  t.true(v.body.is_admin);
  t.is(v.body.tier, 'enterprise');
  t.deepEqual(v.body.limits, { requests_per_minute: null, requests_per_day: null });
  t.is(v.body.expires_at, null);
  // With the identity the edge derives from that validation, admin endpoints answer.
  const headers = identityHeaders({ id: v.body.user_id, email: v.body.email, username: v.body.username }, 'apikey');
  const users = await call(svc, 'GET', '/v1/admin/users', { headers });
  t.is(users.status, 200);
  t.true(users.body.data.some((u: any) => u.id === v.body.user_id && u.is_admin));
  // …including creating keys for others.
  const someone = await createTestUser(svc.runtime.db.knex);
  const made = await call(svc, 'POST', '/v1/admin/api-keys', { headers, body: { user_id: someone.id, name: 'pro key', tier: 'pro' } });
  t.is(made.status, 201);
});

test.serial('idempotent across restarts and concurrent starts; a demoted or disabled bootstrap admin is restored', async (t) => {
  const knex = svc.runtime.db.knex;
  const identity = identityOf(svc.runtime);
  const results = await Promise.all([1, 2, 3].map(() => identity.apiKeys.ensureBootstrapAdmin(KEY)));
  t.true(results.every((r) => !r.created));
  t.is(new Set(results.map((r) => r.userId)).size, 1);
  t.is(Number((await knex('users').where({ username: 'bootstrap-admin' }).count({ c: '*' }))[0]!.c), 1);
  t.is(Number((await knex('identity_api_keys').where({ name: 'bootstrap admin key' }).count({ c: '*' }))[0]!.c), 1);

  await knex('users').where({ id: results[0]!.userId }).update({ is_admin: false, disabled: true });
  assertError(t, await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: KEY } }), 401);
  await identity.apiKeys.ensureBootstrapAdmin(KEY);
  const v = await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: KEY } });
  t.is(v.status, 200);
  t.true(v.body.is_admin);
});
