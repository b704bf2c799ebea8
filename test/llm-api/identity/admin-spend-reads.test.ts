import test from 'ava';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';
import { call } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { adminUserAnswer, adminUserList, apiKeyAnswer, apiKeyList } from '../../../services/llm-api/identity/schemas.js';

// The reads of administration answer a user's and a key's budget and allow-list in the shape a
// PATCH answers (GET of one user, the user list, the key lists), so a form can start from the
// stored values. A list reads the limits of its whole page in one query (no query per row), and
// every answer matches the response schema the API document is generated from.
let svc: TestService;
let admin: TestUser;

test.before(async () => {
  // A long admission cache: the reads must not go through it.
  svc = await startTestService(llmApiService, { env: { LLM_SPEND_LIMITS_CACHE_MS: '3600000', API_KEY_SWEEP_INTERVAL_MS: '2000000000' } });
  admin = await createTestUser(svc.runtime.db.knex, { admin: true });
});
test.after.always(() => svc?.close());

const as = (user: TestUser) => edgeHeaders(svc.gatewaySecret, user, 'jwt');
const NONE = { budget_period: 'day', max_budget_micro_usd: null, max_tokens: null, allowed_models: null };
const spendOf = (answer: Record<string, unknown>) => ({
  budget_period: answer.budget_period,
  max_budget_micro_usd: answer.max_budget_micro_usd,
  max_tokens: answer.max_tokens,
  allowed_models: answer.allowed_models,
});

/** The statements on the limits table while `run` runs (tests using it are serial: nothing else runs then). */
async function limitsQueries<T>(run: () => Promise<T>): Promise<{ result: T; count: number }> {
  let count = 0;
  const onQuery = (q: { sql: string }) => {
    if (q.sql.includes('llm_spend_limits')) count++;
  };
  svc.runtime.db.knex.on('query', onQuery);
  try {
    return { result: await run(), count };
  } finally {
    svc.runtime.db.knex.off('query', onQuery);
  }
}

test.serial('GET of a user and the user list answer the budget a PATCH set, in the PATCH answer’s shape', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const byEmail = `/v1/admin/users?email=${encodeURIComponent(user.email)}`;

  // No budget yet: the defaults, on GET and in the list.
  const before = await call(svc, 'GET', `/v1/admin/users/${user.id}`, { headers: as(admin) });
  t.is(before.status, 200, JSON.stringify(before.body));
  t.like(adminUserAnswer.parse(before.body), { id: user.id, ...NONE });
  const listedBefore = await call(svc, 'GET', byEmail, { headers: as(admin) });
  t.is(listedBefore.status, 200, JSON.stringify(listedBefore.body));
  t.deepEqual(adminUserList.parse(listedBefore.body).data, [before.body]);

  const patched = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, {
    headers: as(admin),
    body: { budget_period: 'month', max_budget_micro_usd: 25_000_000, max_tokens: 4000, allowed_models: ['gpt-4o*', 'llama-3'] },
  });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.deepEqual(spendOf(patched.body), { budget_period: 'month', max_budget_micro_usd: 25_000_000, max_tokens: 4000, allowed_models: ['gpt-4o*', 'llama-3'] });

  const got = await call(svc, 'GET', `/v1/admin/users/${user.id}`, { headers: as(admin) });
  t.deepEqual(adminUserAnswer.parse(got.body), patched.body, 'GET answers what the PATCH answered');
  const listed = await call(svc, 'GET', byEmail, { headers: as(admin) });
  t.deepEqual(adminUserList.parse(listed.body).data, [patched.body], 'the list answers what the PATCH answered');

  // A change written by another process (straight into the table) shows at once: no cache between.
  await svc.runtime.db.knex('llm_spend_limits').where({ scope: 'user', scope_id: user.id }).update({ max_tokens: 5000 });
  t.is((await call(svc, 'GET', `/v1/admin/users/${user.id}`, { headers: as(admin) })).body.max_tokens, 5000);

  // Cleared: null again, the period kept.
  const cleared = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { max_budget_micro_usd: null, max_tokens: null, allowed_models: null } });
  t.is(cleared.status, 200, JSON.stringify(cleared.body));
  t.deepEqual(spendOf((await call(svc, 'GET', `/v1/admin/users/${user.id}`, { headers: as(admin) })).body), { ...NONE, budget_period: 'month' });
  t.deepEqual(spendOf((await call(svc, 'GET', byEmail, { headers: as(admin) })).body.data[0]), { ...NONE, budget_period: 'month' });

  // An unknown user is still a 404 naming the id.
  const missing = await call(svc, 'GET', `/v1/admin/users/user_${'0'.repeat(26)}`, { headers: as(admin) });
  t.is(missing.status, 404);
  t.is(missing.body.error.param, 'id');
});

test.serial('the user list reads the budgets of its whole page in one query', async (t) => {
  const users = [await createTestUser(svc.runtime.db.knex), await createTestUser(svc.runtime.db.knex), await createTestUser(svc.runtime.db.knex)];
  for (const [i, user] of users.entries()) {
    const set = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { max_tokens: 100 + i } });
    t.is(set.status, 200, JSON.stringify(set.body));
  }
  const { result: list, count } = await limitsQueries(() => call(svc, 'GET', '/v1/admin/users?limit=100', { headers: as(admin) }));
  t.is(list.status, 200, JSON.stringify(list.body));
  const page = adminUserList.parse(list.body).data;
  t.true(page.length >= users.length + 1, `${page.length} users listed`);
  t.is(count, 1, 'one query on the limits table for the whole page');
  for (const [i, user] of users.entries()) t.is(page.find((u) => u.id === user.id)?.max_tokens, 100 + i);
  t.like(page.find((u) => u.id === admin.id), NONE);
});

test.serial('the key lists (admin and owner) answer each key’s budget as a PATCH set it, in one query per page', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const limited = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'limited', tier: 'pro' } });
  const plain = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'plain', tier: 'free' } });
  t.is(limited.status, 201, JSON.stringify(limited.body));
  t.is(plain.status, 201, JSON.stringify(plain.body));
  const patched = await call(svc, 'PATCH', `/v1/admin/api-keys/${limited.body.id}`, {
    headers: as(admin),
    body: { budget_period: 'month', max_budget_micro_usd: 2_500_000, allowed_models: ['console-*'] },
  });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  apiKeyAnswer.parse(patched.body);

  const { result: listed, count } = await limitsQueries(() => call(svc, 'GET', `/v1/admin/api-keys?user_id=${user.id}`, { headers: as(admin) }));
  t.is(listed.status, 200, JSON.stringify(listed.body));
  t.is(count, 1, 'one query on the limits table for the whole page');
  const keys = apiKeyList.parse(listed.body).data;
  t.deepEqual(keys.find((k) => k.id === limited.body.id), patched.body, 'the admin list answers what the PATCH answered');
  t.like(keys.find((k) => k.id === plain.body.id), { name: 'plain', ...NONE });

  const own = await call(svc, 'GET', '/auth/api-keys', { headers: as(user) });
  t.is(own.status, 200, JSON.stringify(own.body));
  const ownKeys = apiKeyList.parse(own.body).data;
  t.deepEqual(ownKeys.find((k) => k.id === limited.body.id), patched.body, "the owner's list answers the same");
  t.like(ownKeys.find((k) => k.id === plain.body.id), NONE);
});
