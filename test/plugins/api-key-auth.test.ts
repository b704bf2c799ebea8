import test from 'ava';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import type { Decision, EdgeRequest, VerifiedIdentity } from '../../plugins/core/types.js';
import { ManualClock } from '../../services/kit/clock.js';
import { createInProcessRevocations, userRevocation } from '../../services/kit/revocations.js';
import { listenOn, startFakeValidator } from './fakes.js';

const TOKEN = 'g'.repeat(40);
let validator: Awaited<ReturnType<typeof startFakeValidator>>;
test.before(async () => {
  validator = await startFakeValidator(TOKEN);
});
test.after.always(async () => {
  await validator?.close();
});

function plugin(overrides: Record<string, unknown> = {}) {
  const clock = new ManualClock(1_800_000_000_000);
  const config = parseApiKeyAuthConfig({ validate_url: validator.url, gateway_token: TOKEN, ...overrides });
  return { core: createApiKeyAuth(config, { clock }), clock };
}

const request = (headers: Record<string, string>, shared: EdgeRequest['shared'] = {}, method = 'POST'): EdgeRequest => ({
  method,
  path: '/v1/chat/completions',
  headers,
  clientIp: '127.0.0.1',
  shared,
});

function status(decision: Decision): number {
  return decision.kind === 'respond' ? decision.status : 200;
}
function errorOf(decision: Decision) {
  return decision.kind === 'respond' ? (decision.body as { error: { type: string; code: string; message: string } }).error : null;
}

test.serial('a valid key yields the key owner, removes the key header, and is validated once then cached', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_k1', 'pro');
  const before = validator.calls;
  const first = await core.access(request({ 'x-api-key': key.key }));
  t.is(first.kind, 'continue');
  if (first.kind !== 'continue') return;
  t.deepEqual(first.removeUpstream, ['x-api-key']);
  t.like(first.identity as VerifiedIdentity, { authMethod: 'apikey', userId: 'user_k1', tier: 'pro', bucket: `key:${key.hash}` });
  await core.access(request({ 'x-api-key': key.key }));
  t.is(validator.calls - before, 1);
  // The cache holds the hash, never the key.
  t.is(core.cache.get(key.hash)?.userId, 'user_k1');
});

test.serial('concurrent first requests with one key share one validation', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_k2');
  const before = validator.calls;
  const all = await Promise.all(Array.from({ length: 8 }, () => core.access(request({ 'x-api-key': key.key }))));
  t.true(all.every((d) => d.kind === 'continue'));
  t.is(validator.calls - before, 1);
});

test.serial('an unknown key is 401 unauthorized and is not cached; a malformed key never reaches the validator', async (t) => {
  const { core } = plugin();
  const unknown = `sk_${'A'.repeat(32)}`;
  const before = validator.calls;
  const d1 = await core.access(request({ 'x-api-key': unknown }));
  t.is(status(d1), 401);
  t.like(errorOf(d1), { type: 'auth_error', code: 'unauthorized' });
  await core.access(request({ 'x-api-key': unknown }));
  t.is(validator.calls - before, 2);
  const d2 = await core.access(request({ 'x-api-key': 'sk_short' }));
  t.is(status(d2), 401);
  t.is(validator.calls - before, 2);
});

test.serial('a repeated key header (a list on Kong, a comma-joined line in Node) is 401 naming X-API-Key, even when every copy is valid', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_k_repeated');
  const before = validator.calls;
  for (const sent of [[key.key, key.key], `${key.key}, ${key.key}`]) {
    const decision = await core.access(request({ 'x-api-key': sent as string }));
    t.is(status(decision), 401);
    t.regex(errorOf(decision)!.message, /exactly one API key/);
    t.is((errorOf(decision) as { param?: string }).param, 'X-API-Key');
  }
  t.is(validator.calls, before, 'neither reaches the validator');
  t.is((await core.access(request({ 'x-api-key': [key.key] as unknown as string }))).kind, 'continue', 'a list of one is one key');
});

test.serial("a refusal's param names the header the key came in: a configured header_name, or Authorization for a bearer key", async (t) => {
  const unknown = `sk_${'y'.repeat(32)}`;
  const custom = plugin({ header_name: 'X-Gateway-Key' }).core;
  for (const sent of [unknown, 'garbage', `${unknown}, ${unknown}`]) {
    const decision = await custom.access(request({ 'x-gateway-key': sent }));
    t.is(status(decision), 401);
    t.is((errorOf(decision) as { param?: string }).param, 'X-Gateway-Key', sent);
  }
  for (const sent of [unknown, 'sk_short']) {
    const decision = await plugin().core.access(request({ authorization: `Bearer ${sent}` }));
    t.is(status(decision), 401);
    t.is((errorOf(decision) as { param?: string }).param, 'Authorization', sent);
  }
  // A key in X-API-Key is the one checked (and named) even beside a Bearer key, which still never goes upstream.
  for (const sent of [unknown, 'garbage']) {
    const decision = await plugin().core.access(request({ 'x-api-key': sent, authorization: `Bearer sk_${'w'.repeat(32)}` }));
    t.is(status(decision), 401);
    t.is((errorOf(decision) as { param?: string }).param, 'X-API-Key', sent);
  }
  const owner = validator.add('user_both_headers');
  const both = await plugin().core.access(request({ 'x-api-key': owner.key, authorization: `Bearer sk_${'w'.repeat(32)}` }));
  t.like(both, { kind: 'continue', removeUpstream: ['x-api-key', 'authorization'] });
  // With an anonymous fallback the failure carries the header, for the final refusal to name.
  const fallback = await plugin({ header_name: 'X-Gateway-Key', anonymous: 'anonymous' }).core.access(request({ 'x-gateway-key': unknown }));
  t.like(fallback, { kind: 'continue', failure: { param: 'X-Gateway-Key' } });
});

test.serial('validator errors, timeouts and refusals → 503 service_unavailable, never a pass-through', async (t) => {
  const key = validator.add('user_k3');
  const unreachable = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: 'http://127.0.0.1:9/auth/validate-api-key', timeout_ms: 500 }));
  const d1 = await unreachable.access(request({ 'x-api-key': key.key }));
  t.is(status(d1), 503);
  t.like(errorOf(d1), { type: 'internal_error', code: 'service_unavailable' });
  await unreachable.close();

  const { core } = plugin({ timeout_ms: 200 });
  validator.setMode('error');
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 503);
  validator.setMode('hang');
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 503);
  validator.setMode('normal');
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 200);
  await core.close();
});

test.serial('a validator that refuses the gateway token (a secret rotated on one side only) is unavailable, not every key invalid: 503, logged', async (t) => {
  const key = validator.add('user_k_token');
  const logged: Array<Record<string, unknown>> = [];
  const logger = { warn() {}, error: (fields: Record<string, unknown>) => void logged.push(fields) };
  const config = parseApiKeyAuthConfig({ validate_url: validator.url, gateway_token: 'not-the-gateway-token', anonymous: 'anonymous' });
  const core = createApiKeyAuth(config, { clock: new ManualClock(1_800_000_000_000), logger });
  const refused = await core.access(request({ 'x-api-key': key.key }));
  // With OR logic the failure is recorded as "could not be checked" (the final answer is then 503).
  t.like(refused, { kind: 'continue', anonymous: 'anonymous', failure: { method: 'apikey', status: 503 } });
  t.is(logged.length, 1);
  t.regex(String(logged[0]!.reason), /gateway token/);
  t.is(core.cache.size, 0);
  const alone = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: validator.url, gateway_token: 'not-the-gateway-token' }), { logger });
  t.is(status(await alone.access(request({ 'x-api-key': key.key }))), 503);
  // A key the validator does not know is still invalid (401), with the right token.
  const { core: right } = plugin();
  t.is(status(await right.access(request({ 'x-api-key': `sk_${'B'.repeat(32)}` }))), 401);
  await Promise.all([core.close(), alone.close(), right.close()]);
});

test.serial("a validator answering 400, 403 or 404 (a wrong validate_url path, say) is a gateway fault: 503, logged, never the client's 401", async (t) => {
  const key = validator.add('user_k_wrong_path');
  let answer = 404;
  // Whatever it is asked, it answers `answer` with an error body that does not name the gateway token.
  const wrong = await listenOn((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(answer, { 'content-type': 'application/json' }).end('{"error":{"message":"Not found","type":"not_found_error","param":null,"code":"not_found"}}'));
  });
  t.teardown(() => wrong.close());
  const logged: Array<Record<string, unknown>> = [];
  const logger = { warn() {}, error: (fields: Record<string, unknown>) => void logged.push(fields) };
  const core = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: `${wrong.url}/internal/auth/validate-api-kee`, gateway_token: TOKEN }), { clock: new ManualClock(1_800_000_000_000), logger });
  t.teardown(() => core.close());
  for (const code of [404, 400, 403]) {
    answer = code;
    const decision = await core.access(request({ 'x-api-key': key.key }));
    t.is(status(decision), 503, `validator ${code}`);
    t.like(errorOf(decision), { code: 'service_unavailable' });
    t.regex(String(logged.at(-1)?.reason), new RegExp(`answered ${code}`));
  }
  t.is(logged.length, 3);
  t.is(core.cache.size, 0);
});

test.serial('a revocation purges the cache at once: the next request is revalidated and refused', async (t) => {
  const { core } = plugin({ cache_ttl_seconds: 3600 });
  const channel = createInProcessRevocations();
  await core.attach(channel);
  const key = validator.add('user_k4');
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 200);
  validator.remove(key.key);
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 200, 'still cached before the revocation');
  await channel.publish(key.hash);
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 401);
  await core.close();
});

test.serial('a user revocation purges every cached key of that user only', async (t) => {
  const { core } = plugin({ cache_ttl_seconds: 3600 });
  const channel = createInProcessRevocations();
  await core.attach(channel);
  const a1 = validator.add('user_k5');
  const a2 = validator.add('user_k5');
  const b = validator.add('user_k6');
  for (const k of [a1, a2, b]) await core.access(request({ 'x-api-key': k.key }));
  t.is(core.cache.size, 3);
  await channel.publish(userRevocation('user_k5'));
  t.is(core.cache.size, 1);
  t.truthy(core.cache.get(b.hash));
});

test.serial('a lost subscription (resync) flushes the whole cache', async (t) => {
  const { core } = plugin({ cache_ttl_seconds: 3600 });
  let handlers: { onRevoked(m: string): void; onResync(): void } | undefined;
  await core.attach({ publish: async () => {}, subscribe: async (h) => ((handlers = h), async () => {}), close: async () => {} });
  await core.access(request({ 'x-api-key': validator.add('user_k7').key }));
  t.is(core.cache.size, 1);
  handlers!.onResync();
  t.is(core.cache.size, 0);
});

test.serial('an answer fetched while a revocation arrived is used once but not cached', async (t) => {
  const { core } = plugin({ cache_ttl_seconds: 3600 });
  const key = validator.add('user_k8');
  const pending = core.access(request({ 'x-api-key': key.key }));
  core.cache.revoke('unrelated'); // any purge while in flight moves the epoch
  t.is(status(await pending), 200);
  t.is(core.cache.size, 0);
});

test.serial('cached answers expire after cache_ttl_seconds (clock-driven)', async (t) => {
  const { core, clock } = plugin({ cache_ttl_seconds: 10 });
  const key = validator.add('user_k9');
  const before = validator.calls;
  await core.access(request({ 'x-api-key': key.key }));
  clock.advance(9_000);
  await core.access(request({ 'x-api-key': key.key }));
  t.is(validator.calls - before, 1);
  clock.advance(1_000);
  await core.access(request({ 'x-api-key': key.key }));
  t.is(validator.calls - before, 2);
});

test.serial('a valid JWT and a valid API key of different users → 401; of the same user → accepted', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_k10');
  const jwtOf = (userId: string): VerifiedIdentity => ({ authMethod: 'jwt', userId, subject: userId, email: null, username: null, isGuest: false, bucket: `user:${userId}` });
  const other = await core.access(request({ 'x-api-key': key.key }, { jwt: jwtOf('user_other') }));
  t.is(status(other), 401);
  t.regex(errorOf(other)!.message, /different users/);
  t.is(status(await core.access(request({ 'x-api-key': key.key }, { jwt: jwtOf('user_k10') }))), 200);
});

test.serial('no key: continue after a verified JWT, anonymous consumer otherwise, 401 without anonymous', async (t) => {
  const jwt: VerifiedIdentity = { authMethod: 'jwt', userId: 'u', subject: 'u', email: null, username: null, isGuest: false, bucket: 'user:u' };
  t.deepEqual(await plugin().core.access(request({}, { jwt })), { kind: 'continue' });
  t.deepEqual(await plugin({ anonymous: 'anonymous' }).core.access(request({})), { kind: 'continue', anonymous: 'anonymous' });
  t.is(status(await plugin().core.access(request({}))), 401);
});

test.serial('OR logic: a refused key beside a valid token is ignored (and never sent upstream); alone it falls back to anonymous with the reason', async (t) => {
  const jwt: VerifiedIdentity = { authMethod: 'jwt', userId: 'u', subject: 'u', email: null, username: null, isGuest: false, bucket: 'user:u' };
  const unknown = `sk_${'z'.repeat(32)}`;
  t.deepEqual(await plugin().core.access(request({ 'x-api-key': unknown }, { jwt })), { kind: 'continue', removeUpstream: ['x-api-key'] });
  t.deepEqual(await plugin().core.access(request({ 'x-api-key': 'garbage' }, { jwt })), { kind: 'continue', removeUpstream: ['x-api-key'] });
  t.deepEqual(await plugin({ anonymous: 'anonymous' }).core.access(request({ 'x-api-key': unknown })), {
    kind: 'continue',
    anonymous: 'anonymous',
    failure: { method: 'apikey', status: 401, message: 'Invalid API key', param: 'X-API-Key' },
  });
  // Without anonymous (no OR partner configured) the key is refused outright.
  t.is(status(await plugin().core.access(request({ 'x-api-key': unknown }))), 401);
});

test.serial('a cached validation never outlives the key: expires_at bounds the cache entry', async (t) => {
  const { core, clock } = plugin({ cache_ttl_seconds: 300 });
  const key = validator.add('user_exp');
  validator.setExpiry(key.key, Math.floor(clock.now() / 1000) + 10);
  const before = validator.calls;
  t.is((await core.access(request({ 'x-api-key': key.key }))).kind, 'continue');
  clock.advance(9_000);
  t.is((await core.access(request({ 'x-api-key': key.key }))).kind, 'continue');
  t.is(validator.calls - before, 1, 'cached while the key is valid');
  // The key expires (the validator now refuses it); the 300 s TTL must not keep it alive.
  clock.advance(1_000);
  validator.remove(key.key);
  t.is(status(await core.access(request({ 'x-api-key': key.key }))), 401);
  t.is(validator.calls - before, 2);
});

test.serial('validator answers carry custom limits whatever their naming', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_k11', 'enterprise', { requests_per_minute: 1000, requests_per_day: null });
  const d = await core.access(request({ 'x-api-key': key.key }));
  t.deepEqual(d.kind === 'continue' ? d.identity?.limits : null, { minute: 1000, day: null });
});

test.serial('an sk_ key sent as Authorization: Bearer (OpenAI SDKs) is accepted and hidden from the upstream', async (t) => {
  const { core } = plugin();
  const key = validator.add('user_bearer');
  const d = await core.access(request({ authorization: `Bearer ${key.key}` }));
  t.is(d.kind, 'continue');
  if (d.kind !== 'continue') return;
  t.is(d.identity?.userId, 'user_bearer');
  t.deepEqual(d.removeUpstream, ['x-api-key', 'authorization']);
  t.is(status(await core.access(request({ authorization: `Bearer sk_${'Y'.repeat(32)}` }))), 401);
  const off = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: validator.url, gateway_token: TOKEN, accept_bearer: false, anonymous: 'anonymous' }));
  t.deepEqual(await off.access(request({ authorization: `Bearer ${key.key}` })), { kind: 'continue', anonymous: 'anonymous' });
  await off.close();
});

test.serial("a key hash an earlier plugin left on the request is used only for the key it was made from", async (t) => {
  const { core } = plugin();
  const owner = validator.add('user_k_memo');
  const other = validator.add('user_k_memo_other');
  // The rate limiter hashed this request's key first: api-key-auth takes the same hash.
  const same = request({ 'x-api-key': owner.key });
  same.keyHash = { key: owner.key, hash: owner.hash };
  t.like((await core.access(same)) as { identity: VerifiedIdentity }, { identity: { userId: 'user_k_memo' } });
  // A hash left for another key is never taken for the key the request presents.
  const stale = request({ 'x-api-key': other.key });
  stale.keyHash = { key: owner.key, hash: owner.hash };
  t.like((await core.access(stale)) as { identity: VerifiedIdentity }, { identity: { userId: 'user_k_memo_other' } });
  t.deepEqual(stale.keyHash, { key: other.key, hash: other.hash });
});
