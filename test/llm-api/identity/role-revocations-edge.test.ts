import test from 'ava';
import { ManualClock, offsetToNextMinute, randomBase62 } from '../../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../../helpers/platform.js';
import { createTestUser } from '../../helpers/users.js';

// Through the embedded edge: an administrator's key is exempt from the per-address limit, and the
// edge learns that from the key's validation answer, which it caches (EDGE_API_KEY_CACHE_TTL_SECONDS).
// Demoting the administrator must end the exemption at once, not when the cached answer expires.
// The whole platform shares one ManualClock that does not move within the test, so the cached
// answer would never expire on its own: only the revocation can make the edge ask again.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const IP_LIMIT = 4;
const clock = new ManualClock(Date.now());
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({
    clock,
    env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_RATE_LIMIT_IP_PER_MINUTE: String(IP_LIMIT), LLM_HEALTH_PROBE_INTERVAL_MS: '0' },
  });
});
test.after.always(() => p?.stop());

async function edge(method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(`${p.url}${path}`, {
    method,
    headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

test('a demoted administrator\'s key loses the per-address exemption at once', async (t) => {
  const knex = p.runtime.db.knex;
  const deputy = await createTestUser(knex);
  const member = await createTestUser(knex);
  // Set up with the bootstrap admin's key (exempt): promote the deputy, give each user a free key.
  t.is((await edge('PATCH', `/v1/admin/users/${deputy.id}`, ADMIN_KEY, { is_admin: true })).status, 200);
  const deputyKey = (await edge('POST', '/v1/admin/api-keys', ADMIN_KEY, { user_id: deputy.id, name: 'deputy', tier: 'free' })).body.key as string;
  const memberKey = (await edge('POST', '/v1/admin/api-keys', ADMIN_KEY, { user_id: member.id, name: 'member', tier: 'free' })).body.key as string;
  t.truthy(deputyKey);
  t.truthy(memberKey);

  // A fresh minute: the member's key spends the address's allowance.
  clock.advance(offsetToNextMinute(clock));
  let refused = false;
  for (let i = 0; i <= IP_LIMIT + 1 && !refused; i++) refused = (await edge('GET', '/v1/models', memberKey)).status === 429;
  t.true(refused, 'the address is over its limit');

  // The deputy's key is an administrator's: it still passes (its answer is now in the edge's cache).
  t.is((await edge('GET', '/v1/models', deputyKey)).status, 200);
  t.is((await edge('GET', '/v1/models', deputyKey)).status, 200);

  // Demoted (the bootstrap admin is exempt, so the change itself gets through)...
  const demoted = await edge('PATCH', `/v1/admin/users/${deputy.id}`, ADMIN_KEY, { is_admin: false });
  t.is(demoted.status, 200, JSON.stringify(demoted.body));
  t.false(demoted.body.is_admin);

  // ...the deputy's key is held to the address's limit at once, on the same manual minute.
  t.is((await edge('GET', '/v1/models', deputyKey)).status, 429);
});
