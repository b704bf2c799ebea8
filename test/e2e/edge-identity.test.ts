import test from 'ava';
import OpenAI from 'openai';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The whole platform (real llm-api identity: embedded JWT issuer, JWKS, validate-api-key) behind
// the embedded edge on deck/kong.yaml. Free keys: 3/minute; guests use the pro tier here so the
// token tests are not limited. The platform clock is shifted to 1 s after a minute boundary at
// start (identity and edge share it), so the file's requests fall in one rate-limit window.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({
    clock: offsetClock(offsetToNextMinute()),
    env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_RATE_LIMIT_FREE_PER_MINUTE: '3', EDGE_RATE_LIMIT_GUEST_TIER: 'pro' },
  });
});
test.after.always(async () => {
  await p?.stop();
});

async function call(path: string, init: RequestInit = {}) {
  const res = await fetch(`${p.url}${path}`, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: (text ? JSON.parse(text) : null) as any };
}

async function guest() {
  const login = await call('/llm/auth/guest-login', { method: 'POST' });
  if (login.status !== 200 && login.status !== 201) throw new Error(`guest login: ${login.status}`);
  return login.json as { access_token: string; user_id: string };
}

async function keyFor(userId: string, tier = 'free') {
  const created = await call('/v1/admin/api-keys', {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: userId, name: 'e2e', tier }),
  });
  if (created.status !== 201) throw new Error(`key create: ${created.status} ${JSON.stringify(created.json)}`);
  return created.json as { id: string; key: string };
}

test.serial('a JWT from the embedded issuer is accepted through the edge', async (t) => {
  const { access_token } = await guest();
  const res = await call('/auth/api-keys', { headers: { authorization: `Bearer ${access_token}` } });
  t.is(res.status, 200);
  t.is(res.json.object, 'list');
  const viaLlm = await call('/llm/v1/conversations', { headers: { authorization: `Bearer ${access_token}` } });
  t.is(viaLlm.status, 200);
});

test.serial('an API key is accepted (X-API-Key, and as Bearer with the openai SDK)', async (t) => {
  const user = await guest();
  const { key } = await keyFor(user.user_id, 'pro');
  t.is((await call('/v1/conversations', { headers: { 'x-api-key': key } })).status, 200);
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key, maxRetries: 0 });
  const models = await client.models.list();
  t.true(Array.isArray(models.data));
  const withToken = new OpenAI({ baseURL: `${p.url}/llm/v1`, apiKey: user.access_token, maxRetries: 0 });
  t.true(Array.isArray((await withToken.models.list()).data));
});

test.serial('neither credential → 401; a bad key → 401; a forged token → 401', async (t) => {
  const none = await call('/v1/conversations');
  t.is(none.status, 401);
  t.like(none.json.error, { type: 'auth_error', code: 'unauthorized' });
  t.is((await call('/v1/conversations', { headers: { 'x-api-key': `sk_${randomBase62(32)}` } })).status, 401);
  const { access_token } = await guest();
  const [h, body] = access_token.split('.');
  const claims = JSON.parse(Buffer.from(body!, 'base64url').toString());
  const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, sub: 'user_admin' })).toString('base64url')}.${access_token.split('.')[2]}`;
  t.is((await call('/v1/conversations', { headers: { authorization: `Bearer ${forged}` } })).status, 401);
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'not-a-credential', maxRetries: 0 });
  await t.throwsAsync(client.models.list(), { instanceOf: OpenAI.AuthenticationError });
});

test.serial('a key and a token of different users → 401; of the same user → 200', async (t) => {
  const a = await guest();
  const b = await guest();
  const { key } = await keyFor(b.user_id, 'pro');
  t.is((await call('/v1/conversations', { headers: { authorization: `Bearer ${a.access_token}`, 'x-api-key': key } })).status, 401);
  t.is((await call('/v1/conversations', { headers: { authorization: `Bearer ${b.access_token}`, 'x-api-key': key } })).status, 200);
});

test.serial('a revoked key → 401 on the next request', async (t) => {
  const user = await guest();
  const { id, key } = await keyFor(user.user_id, 'pro');
  t.is((await call('/v1/conversations', { headers: { 'x-api-key': key } })).status, 200);
  t.is((await call('/v1/conversations', { headers: { 'x-api-key': key } })).status, 200); // cached at the edge now
  const deleted = await call(`/auth/api-keys/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${user.access_token}` } });
  t.is(deleted.status, 200);
  const after = await call('/v1/conversations', { headers: { 'x-api-key': key } });
  t.is(after.status, 401);
});

test.serial('spoofed identity headers do not reach llm-api', async (t) => {
  const user = await guest();
  const spoof = { 'x-user-id': 'user_admin', 'x-auth-method': 'apikey', 'x-gateway-token': 'forged' };
  // As the spoofed admin this would list every key; as the real caller it lists only the caller's.
  const admin = await call('/v1/admin/api-keys', { headers: { ...spoof, authorization: `Bearer ${user.access_token}` } });
  t.is(admin.status, 403);
  t.is((await call('/v1/admin/api-keys', { headers: spoof })).status, 401);
});

test.serial('free-tier key: 3 requests per minute, the 4th is 429 with the tier headers', async (t) => {
  const user = await guest();
  const { key } = await keyFor(user.user_id, 'free');
  for (let i = 1; i <= 3; i++) {
    const res = await call('/v1/conversations', { headers: { 'x-api-key': key } });
    t.is(res.status, 200);
    t.is(res.headers.get('x-ratelimit-limit'), '3');
    t.is(res.headers.get('x-ratelimit-remaining'), String(3 - i));
    t.truthy(res.headers.get('x-ratelimit-reset'));
  }
  const over = await call('/v1/conversations', { headers: { 'x-api-key': key } });
  t.is(over.status, 429);
  t.like(over.json.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  t.truthy(over.headers.get('retry-after'));
  t.is(over.headers.get('x-ratelimit-remaining'), '0');
});
