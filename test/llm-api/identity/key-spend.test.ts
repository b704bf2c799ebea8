import test from 'ava';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';
import { call } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

// A key (or a user change) and its budget are one transaction: when the budget cannot be written,
// nothing of the request is left behind (no key that a retry would duplicate, no half-applied
// patch). The failure is real: a CHECK constraint this file adds to its own schema refuses one
// budget value, so the database itself fails the statement. And concurrent changes of different
// budget fields all survive (one upsert statement, no read-modify-write).
const REFUSED_BUDGET = 4242;
let svc: TestService;
let admin: TestUser;

test.before(async () => {
  svc = await startTestService(llmApiService, { env: { API_KEYS_MAX_PER_USER: '2', API_KEY_SWEEP_INTERVAL_MS: '2000000000' } });
  admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  await svc.runtime.db.knex.raw(`alter table llm_spend_limits add constraint test_refused_budget check (max_budget_micro_usd is distinct from ${REFUSED_BUDGET})`);
});
test.after.always(() => svc?.close());

const as = (user: TestUser) => edgeHeaders(svc.gatewaySecret, user, 'jwt');
const keysOf = async (userId: string) => Number((await svc.runtime.db.knex('identity_api_keys').where({ user_id: userId }).count({ n: '*' }))[0]!.n);
const limitsOf = (scope: 'key' | 'user', id: string) => svc.runtime.db.knex('llm_spend_limits').where({ scope, scope_id: id }).first();

test('a failing budget write leaves no key behind: retries neither duplicate keys nor use up the per-user cap', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  // The caller's own key: three failed attempts, yet the cap (2) still admits two keys afterwards.
  for (let i = 0; i < 3; i++) {
    const failed = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'laptop', max_budget_micro_usd: REFUSED_BUDGET } });
    t.is(failed.status, 500, JSON.stringify(failed.body));
  }
  t.is(await keysOf(user.id), 0);
  const created = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'laptop', max_budget_micro_usd: 1000 } });
  t.is(created.status, 201, JSON.stringify(created.body));
  t.is(created.body.max_budget_micro_usd, 1000);
  t.is(created.body.budget_period, 'day');

  // An administrator's key for the user: the same.
  const adminFailed = await call(svc, 'POST', '/v1/admin/api-keys', {
    headers: as(admin),
    body: { user_id: user.id, name: 'ci', tier: 'pro', max_budget_micro_usd: REFUSED_BUDGET, allowed_models: ['a-*'] },
  });
  t.is(adminFailed.status, 500, JSON.stringify(adminFailed.body));
  t.is(await keysOf(user.id), 1);
  const adminCreated = await call(svc, 'POST', '/v1/admin/api-keys', {
    headers: as(admin),
    body: { user_id: user.id, name: 'ci', tier: 'pro', max_budget_micro_usd: 5, allowed_models: ['a-*'] },
  });
  t.is(adminCreated.status, 201, JSON.stringify(adminCreated.body));
  t.deepEqual(adminCreated.body.allowed_models, ['a-*']);
  t.is(await keysOf(user.id), 2);
});

test('the rules of key creation hold before anything is written (guest, tier, limits, TTL)', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const guest = await createTestUser(svc.runtime.db.knex, { guest: true });
  const tier = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { tier: 'enterprise', max_budget_micro_usd: 10 } });
  t.is(tier.status, 403);
  t.is(tier.body.error.param, 'tier');
  const limits = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { limits: { requests_per_minute: 5 } } });
  t.is(limits.status, 403);
  t.is(limits.body.error.param, 'limits');
  const ttl = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { expires_in_days: 36500 } });
  t.is(ttl.status, 400);
  t.is(ttl.body.error.param, 'expires_in_days');
  const adminTtl = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'x', tier: 'pro', expires_in_days: 36500 } });
  t.is(adminTtl.status, 400);
  t.is(adminTtl.body.error.param, 'expires_in_days');
  const asGuest = await call(svc, 'POST', '/auth/api-keys', { headers: as(guest), body: {} });
  t.is(asGuest.status, 403);
  const withKey = await call(svc, 'POST', '/auth/api-keys', { headers: edgeHeaders(svc.gatewaySecret, user, 'apikey'), body: {} });
  t.is(withKey.status, 403);
  t.is(withKey.body.error.param, 'Authorization');
  t.is(await keysOf(user.id), 0);
  t.is(await svc.runtime.db.knex('llm_spend_limits').where({ scope: 'user', scope_id: user.id }).first(), undefined);
});

test('a failing budget write undoes the rest of an admin PATCH (key tier, user flags)', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const key = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'k', tier: 'free' } });
  t.is(key.status, 201);
  const keyPatch = await call(svc, 'PATCH', `/v1/admin/api-keys/${key.body.id}`, { headers: as(admin), body: { tier: 'pro', max_budget_micro_usd: REFUSED_BUDGET } });
  t.is(keyPatch.status, 500, JSON.stringify(keyPatch.body));
  t.is((await svc.runtime.db.knex('identity_api_keys').where({ id: key.body.id }).first()).tier, 'free');
  t.is(await limitsOf('key', key.body.id), undefined);

  const userPatch = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { email_verified: true, max_budget_micro_usd: REFUSED_BUDGET } });
  t.is(userPatch.status, 500, JSON.stringify(userPatch.body));
  t.false((await svc.runtime.db.knex('users').where({ id: user.id }).first()).email_verified);
  t.is(await limitsOf('user', user.id), undefined);

  // And the same requests with a budget the database accepts apply every part.
  const ok = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { email_verified: true, max_budget_micro_usd: 7 } });
  t.is(ok.status, 200, JSON.stringify(ok.body));
  t.true(ok.body.email_verified);
  t.is(ok.body.max_budget_micro_usd, 7);
  const budgetOnly = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { max_tokens: 9 } });
  t.is(budgetOnly.status, 200);
  t.is(budgetOnly.body.max_budget_micro_usd, 7, 'fields not given keep their value');
  t.is(budgetOnly.body.max_tokens, 9);
  const missing = await call(svc, 'PATCH', `/v1/admin/users/user_${'0'.repeat(26)}`, { headers: as(admin), body: { max_tokens: 9 } });
  t.is(missing.status, 404);
});

test('concurrent PATCHes of different budget fields all survive (keys and users)', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const key = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'k', tier: 'free' } });
  t.is(key.status, 201);
  for (let round = 1; round <= 8; round++) {
    for (const [scope, path] of [
      ['key', `/v1/admin/api-keys/${key.body.id}`],
      ['user', `/v1/admin/users/${user.id}`],
    ] as const) {
      const replies = await Promise.all([
        call(svc, 'PATCH', path, { headers: as(admin), body: { max_tokens: round } }),
        call(svc, 'PATCH', path, { headers: as(admin), body: { max_budget_micro_usd: round * 10 } }),
        call(svc, 'PATCH', path, { headers: as(admin), body: { allowed_models: [`m-${round}`] } }),
        call(svc, 'PATCH', path, { headers: as(admin), body: { budget_period: round % 2 ? 'month' : 'day' } }),
      ]);
      for (const reply of replies) t.is(reply.status, 200, JSON.stringify(reply.body));
      const row = await limitsOf(scope, scope === 'key' ? key.body.id : user.id);
      t.is(Number(row.max_tokens), round, `${scope} round ${round}`);
      t.is(Number(row.max_budget_micro_usd), round * 10, `${scope} round ${round}`);
      t.deepEqual(row.allowed_models, [`m-${round}`], `${scope} round ${round}`);
      t.is(row.period, round % 2 ? 'month' : 'day', `${scope} round ${round}`);
    }
  }
});
