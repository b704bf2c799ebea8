import test from 'ava';
import OpenAI, { RateLimitError, type APIError } from 'openai';
import { ManualClock, offsetToNextMinute, randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The tier of self-created keys (API_KEY_DEFAULT_TIER), upgrade marking the e-mail verified
// (UPGRADE_VERIFIES_EMAIL), and the per-address limit, which never holds back enterprise or admin
// keys, through the edge with the official openai SDK. Everything comes from 127.0.0.1, so every
// request shares one address bucket of IP_LIMIT a minute; each test starts in a fresh minute window
// on the manual clock.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const IP_LIMIT = 8;
const clock = new ManualClock(Date.now());
let p: TestPlatform;
let member: { userId: string; accessToken: string };

const keyClient = (secret: string) =>
  new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': secret, Authorization: null } });
const nextMinute = () => clock.advance(offsetToNextMinute(clock));

async function post(path: string, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${p.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
}

test.before(async () => {
  p = await startTestPlatform({
    clock,
    env: {
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      API_KEY_DEFAULT_TIER: 'pro',
      UPGRADE_VERIFIES_EMAIL: 'true',
      EDGE_RATE_LIMIT_IP_PER_MINUTE: String(IP_LIMIT),
      LLM_HEALTH_PROBE_INTERVAL_MS: '0',
    },
  });
  nextMinute();
  const guest = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' }).then((r) => r.json() as Promise<any>);
  member = { userId: guest.user_id, accessToken: guest.access_token };
});
test.after.always(async () => {
  await p?.stop();
});

test.serial('self-created keys get API_KEY_DEFAULT_TIER; a member cannot pick another tier; upgrade marks the e-mail verified when set', async (t) => {
  const bearer = { authorization: `Bearer ${member.accessToken}` };
  const upgraded = await post('/llm/auth/upgrade', { email: `tier-${randomBase62(6).toLowerCase()}@example.com` }, bearer);
  t.is(upgraded.status, 200);
  t.true(upgraded.body.email_verified, 'UPGRADE_VERIFIES_EMAIL=true');

  const created = await post('/llm/auth/api-keys', {}, bearer);
  t.is(created.status, 201, JSON.stringify(created.body));
  t.is(created.body.tier, 'pro');
  t.is((await p.runtime.db.knex('identity_api_keys').where({ id: created.body.id }).first()).tier, 'pro');
  const picked = await post('/llm/auth/api-keys', { tier: 'enterprise' }, bearer);
  t.is(picked.status, 403);
  t.is(picked.body.error.param, 'tier');
  t.regex(picked.body.error.message, /'pro' tier/);
  t.is((await post('/llm/auth/api-keys', { tier: 'pro' }, bearer)).status, 201, 'naming the default tier is fine');
  // The edge sees the key's tier from the validator: the pro limits apply to it.
  const models = await keyClient(created.body.key).models.list().withResponse();
  t.is(models.response.status, 200);
});

test.serial('the per-address limit holds a free key back, never an enterprise or an admin key', async (t) => {
  nextMinute();
  const admin = keyClient(ADMIN_KEY); // the bootstrap admin: enterprise tier, administrator
  const adminFree: any = await admin.post('/admin/api-keys', { body: { user_id: (await p.runtime.db.knex('users').where({ is_admin: true }).first()).id, name: 'admin-free', tier: 'free' } });
  const memberEnterprise: any = await admin.post('/admin/api-keys', { body: { user_id: member.userId, name: 'member-enterprise', tier: 'enterprise' } });
  const memberFree: any = await admin.post('/admin/api-keys', { body: { user_id: member.userId, name: 'member-free', tier: 'free' } });

  // Far more than the address allows, with each exempt key.
  for (const [name, secret] of [['bootstrap admin (enterprise)', ADMIN_KEY], ["an administrator's free key", adminFree.key], ["a member's enterprise key", memberEnterprise.key]] as const) {
    const client = keyClient(secret);
    let ok = 0;
    for (let i = 0; i < 2 * IP_LIMIT; i++) ok += (await client.models.list().withResponse()).response.status === 200 ? 1 : 0;
    t.is(ok, 2 * IP_LIMIT, `${name}: ${2 * IP_LIMIT} requests in one minute`);
  }

  // The member's free key is held to the address's limit (only the exempt keys' first requests counted).
  const free = keyClient(memberFree.key);
  let served = 0;
  let refusal: APIError | undefined;
  for (let i = 0; i < IP_LIMIT + 1 && !refusal; i++) {
    try {
      await free.models.list();
      served++;
    } catch (error) {
      refusal = error as APIError;
    }
  }
  t.true(refusal instanceof RateLimitError, 'the free key is refused within the limit');
  t.regex(refusal!.message, /requests per minute from this address/);
  t.is(served, IP_LIMIT - 3, 'each of the three exempt keys counted once, on its first request, before it was known');

  // With the address over its limit, the exempt keys still pass.
  await admin.models.list();
  await keyClient(memberEnterprise.key).models.list();
  await keyClient(adminFree.key).models.list();
  await t.throwsAsync(free.models.list(), { instanceOf: RateLimitError });

  nextMinute();
  await free.models.list();
});
