import test from 'ava';
import OpenAI, { AuthenticationError, PermissionDeniedError, RateLimitError } from 'openai';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';

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

// Clients of the official SDK. Routes without an SDK resource (conversations listing, API keys,
// guest login) go through its generic get/post/delete; `base` is the path after the edge's URL.
const client = (base: string, options: { token?: string; headers?: Record<string, string | null> } = {}) =>
  new OpenAI({ baseURL: `${p.url}${base}`, apiKey: options.token ?? 'unused', maxRetries: 0, defaultHeaders: { ...(options.token ? {} : { Authorization: null }), ...options.headers } });
const anonymous = (base = '/v1', headers: Record<string, string> = {}) => client(base, { headers });
const withToken = (token: string, base = '/v1', headers: Record<string, string> = {}) => client(base, { token, headers });
const withKey = (key: string) => keyClient(p, key);

/** The status of a request the SDK answered with 2xx. */
const okStatus = async (request: { withResponse(): Promise<{ response: Response }> }) => (await request.withResponse()).response.status;

async function guest() {
  return (await anonymous('').post('/llm/auth/guest-login')) as { access_token: string; user_id: string };
}

async function keyFor(userId: string, tier = 'free') {
  return (await withKey(ADMIN_KEY).post('/admin/api-keys', { body: { user_id: userId, name: 'e2e', tier } })) as { id: string; key: string };
}

test.serial('a JWT from the embedded issuer is accepted through the edge', async (t) => {
  const { access_token } = await guest();
  const keys = (await withToken(access_token, '').get('/auth/api-keys')) as { object: string };
  t.is(keys.object, 'list');
  t.is(await okStatus(withToken(access_token, '/llm/v1').get('/conversations')), 200);
});

test.serial('an API key is accepted (X-API-Key, and as Bearer with the openai SDK)', async (t) => {
  const user = await guest();
  const { key } = await keyFor(user.user_id, 'pro');
  t.is(await okStatus(withKey(key).get('/conversations')), 200);
  const bearer = withToken(key);
  const models = await bearer.models.list();
  t.true(Array.isArray(models.data));
  t.true(Array.isArray((await withToken(user.access_token, '/llm/v1').models.list()).data));
});

test.serial('neither credential → 401; a bad key → 401; a forged token → 401', async (t) => {
  const none = await t.throwsAsync(anonymous().get('/conversations'), { instanceOf: AuthenticationError });
  t.like(none?.error, { type: 'auth_error', code: 'unauthorized' });
  await t.throwsAsync(withKey(`sk_${randomBase62(32)}`).get('/conversations'), { instanceOf: AuthenticationError });
  const { access_token } = await guest();
  const [h, body] = access_token.split('.');
  const claims = JSON.parse(Buffer.from(body!, 'base64url').toString());
  const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, sub: 'user_admin' })).toString('base64url')}.${access_token.split('.')[2]}`;
  await t.throwsAsync(withToken(forged).get('/conversations'), { instanceOf: AuthenticationError });
  await t.throwsAsync(withToken('not-a-credential').models.list(), { instanceOf: AuthenticationError });
});

test.serial('a key and a token of different users → 401; of the same user → 200', async (t) => {
  const a = await guest();
  const b = await guest();
  const { key } = await keyFor(b.user_id, 'pro');
  await t.throwsAsync(withToken(a.access_token, '/v1', { 'X-API-Key': key }).get('/conversations'), { instanceOf: AuthenticationError });
  t.is(await okStatus(withToken(b.access_token, '/v1', { 'X-API-Key': key }).get('/conversations')), 200);
});

test.serial('a revoked key → 401 on the next request', async (t) => {
  const user = await guest();
  const { id, key } = await keyFor(user.user_id, 'pro');
  const keyed = withKey(key);
  t.is(await okStatus(keyed.get('/conversations')), 200);
  t.is(await okStatus(keyed.get('/conversations')), 200); // cached at the edge now
  t.is(await okStatus(withToken(user.access_token, '').delete(`/auth/api-keys/${id}`)), 200);
  await t.throwsAsync(keyed.get('/conversations'), { instanceOf: AuthenticationError });
});

test.serial('spoofed identity headers do not reach llm-api', async (t) => {
  const user = await guest();
  // The headers the edge sets for the services, forged by the caller (the SDK sends them as extra headers).
  const spoof = { 'x-user-id': 'user_admin', 'x-auth-method': 'apikey', 'x-gateway-token': 'forged' };
  // As the spoofed admin this would list every key; as the real caller it is refused.
  await t.throwsAsync(withToken(user.access_token, '/v1', spoof).get('/admin/api-keys'), { instanceOf: PermissionDeniedError });
  await t.throwsAsync(anonymous('/v1', spoof).get('/admin/api-keys'), { instanceOf: AuthenticationError });
});

test.serial('free-tier key: 3 requests per minute, the 4th is 429 with the tier headers', async (t) => {
  const user = await guest();
  const { key } = await keyFor(user.user_id, 'free');
  const keyed = withKey(key);
  for (let i = 1; i <= 3; i++) {
    const { response } = await keyed.get('/conversations').withResponse();
    t.is(response.status, 200);
    t.is(response.headers.get('x-ratelimit-limit'), '3');
    t.is(response.headers.get('x-ratelimit-remaining'), String(3 - i));
    t.truthy(response.headers.get('x-ratelimit-reset'));
  }
  const over = await t.throwsAsync(keyed.get('/conversations'), { instanceOf: RateLimitError });
  t.is(over?.status, 429);
  t.like(over?.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  t.truthy(over?.headers?.get('retry-after'));
  t.is(over?.headers?.get('x-ratelimit-remaining'), '0');
});
