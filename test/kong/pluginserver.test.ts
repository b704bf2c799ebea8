import test from 'ava';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Schema as apiKeySchema } from '../../plugins/api-key-auth/schema.js';
import { SHARED_KEY } from '../../plugins/core/kong-host.js';
import { Schema as identitySchema } from '../../plugins/identity-headers/schema.js';
import { Schema as jwtSchema } from '../../plugins/jwt-auth/schema.js';
import { Schema as rateLimitSchema } from '../../plugins/tiered-rate-limit/schema.js';
import { offsetClock, offsetToNextMinute, type Clock } from '../../services/kit/clock.js';
import { createRedisRevocations } from '../../services/kit/revocations-redis.js';
import { revocationChannelFor } from '../../services/kit/revocations.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';
import { AUDIENCE, ISSUER, startFakeIssuer, startFakeValidator, unsignedToken } from '../plugins/fakes.js';
import { DEFAULT_WORKSPACE_ID, dumpAllPlugins, GLOBAL, SERVICE_SCOPED, startPluginServer, startPluginServers, type KongScope } from './harness.js';

// The compiled plugins (esbuild bundles from plugins/<name>/kong.ts) loaded by the real
// kong-js-pluginserver of kong-pdk 0.6.0 and driven over its Unix socket as Kong drives them.
const EXPECTED = [
  { Name: 'jwt-auth', Priority: 1450, Phases: ['access'], Schema: jwtSchema },
  { Name: 'api-key-auth', Priority: 1250, Phases: ['access'], Schema: apiKeySchema },
  { Name: 'identity-headers', Priority: 1000, Phases: ['access'], Schema: identitySchema },
  // rewrite: the per-IP limit before authentication (the plugin is global in deck/kong.yaml)
  { Name: 'tiered-rate-limit', Priority: 910, Phases: ['rewrite', 'access'], Schema: rateLimitSchema },
];
const TOKEN = 'k'.repeat(40);
let plugins: Awaited<ReturnType<typeof startPluginServers>>;
let issuer: Awaited<ReturnType<typeof startFakeIssuer>>;
let validator: Awaited<ReturnType<typeof startFakeValidator>>;
/** tiered-rate-limit's clock: at second 1 of a minute window when its server starts (see its test). */
let rateLimitClock: Clock;

test.before(async () => {
  issuer = await startFakeIssuer();
  validator = await startFakeValidator(TOKEN);
  const clockOffsetMs = offsetToNextMinute();
  rateLimitClock = offsetClock(clockOffsetMs);
  plugins = await startPluginServers(EXPECTED.map(({ Name }) => Name), { clockOffsetMs });
});

test.after.always(async () => {
  await plugins?.stop();
  await issuer?.close();
  await validator?.close();
});

const server = (name: string) => plugins.server(name);

/** Exit bodies are JSON text with a JSON content type (so `"param": null` survives the trip to Lua). */
function errorOf(r: { exit?: { body: unknown; headers?: Record<string, unknown> } }) {
  const headers = r.exit!.headers ?? {};
  if (headers['Content-Type'] !== 'application/json; charset=utf-8') throw new Error(`exit without a JSON content type: ${JSON.stringify(headers)}`);
  const body = JSON.parse(String(r.exit!.body)) as { error: { type: string; code: string; message: string; param: unknown } };
  if (!('param' in body.error)) throw new Error('shape A lost its param field');
  return body.error;
}

for (const expected of EXPECTED) {
  test(`--dump-all-plugins prints exactly the expected JSON for ${expected.Name}`, (t) => {
    t.deepEqual(readdirSync(join(plugins.dist, expected.Name)), [`${expected.Name}.js`], 'the plugin directory holds only its entry file');
    const { stdout, status } = dumpAllPlugins(join(plugins.dist, expected.Name));
    t.is(status, 0);
    // Pure JSON on stdout (anything else would make Kong fail to start).
    t.deepEqual(JSON.parse(stdout), [
      {
        Name: expected.Name,
        Version: '0.1.0',
        Phases: expected.Phases,
        Priority: expected.Priority,
        Schema: { name: expected.Name, fields: [{ config: { type: 'record', fields: JSON.parse(JSON.stringify(expected.Schema)) } }] },
      },
    ]);
  });
}

test('GetStatus and an unknown instance answer like Kong expects', async (t) => {
  const s = server('identity-headers');
  const status = await s.rpc.call('GetStatus', null);
  t.truthy(status.Plugins['identity-headers']);
  await t.throwsAsync(s.rpc.call('HandleEvent', { InstanceId: 999, EventName: 'access' }), { message: /^no plugin instance #999/ });
});

test('identity-headers: spoofed headers cleared, gateway token set (multimap request headers)', async (t) => {
  const s = server('identity-headers');
  const id = await s.start('identity-headers', { gateway_token: 'gw-secret' }, GLOBAL);
  const r = await s.run(id, { headers: { 'X-User-ID': 'admin', 'x-auth-method': 'jwt', 'x-user-email': ['a@x', 'b@x'], accept: 'text/plain' } });
  t.is(r.status, null, 'proxied');
  const { 'x-request-id': requestId, ...rest } = r.upstreamHeaders;
  t.deepEqual(rest, { accept: ['text/plain'], 'x-gateway-token': ['gw-secret'] });
  // The first plugin of a request fixes its id: sent upstream and back to the client.
  t.regex(requestId![0]!, /^[0-9a-f-]{36}$/);
  t.is(r.responseHeaders['X-Request-ID'], requestId![0]);
});

test('identity-headers: the anonymous consumer is answered 401 with the refused credential reason and the request id', async (t) => {
  const s = server('identity-headers');
  const id = await s.start('identity-headers', {}, GLOBAL);
  const shared = { [SHARED_KEY]: { anonymous: true, failures: [{ method: 'jwt', status: 401, message: 'Token expired' }] } };
  const r = await s.run(id, { headers: { 'x-request-id': 'req-kong-1' } }, shared);
  t.is(r.status, 401);
  t.like(errorOf(r), { type: 'auth_error', code: 'unauthorized', message: 'Token expired' });
  t.is((JSON.parse(String(r.exit!.body)) as { error: { request_id: string } }).error.request_id, 'req-kong-1');
  t.is(r.exit!.headers?.['X-Request-ID'], 'req-kong-1');
  const none = await s.run(id, { headers: {} }, { [SHARED_KEY]: { anonymous: true } });
  t.is(none.status, 401);
  t.regex(errorOf(none).message, /^Missing credentials/);
});

test('identity-headers: identity taken from kong.ctx.shared (set by the auth plugins)', async (t) => {
  const s = server('identity-headers');
  const id = await s.start('identity-headers', {}, GLOBAL);
  const shared = { [SHARED_KEY]: { apikey: { authMethod: 'apikey', userId: 'user_1', subject: 'user_1', email: 'u@x', username: 'u', isGuest: false, bucket: 'key:abc' } } };
  const r = await s.run(id, { headers: { 'x-user-id': 'admin' } }, shared);
  t.like(r.upstreamHeaders, { 'x-auth-method': ['apikey'], 'x-user-id': ['user_1'], 'x-user-email': ['u@x'] });
});

test('jwt-auth: a valid token is verified; identity stored in ctx.shared, credential authenticated', async (t) => {
  const s = server('jwt-auth');
  const id = await s.start('jwt-auth', { issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, anonymous: 'anonymous' });
  const token = await issuer.sign({}, { sub: 'user_kong' });
  const r = await s.run(id, { headers: { authorization: `Bearer ${token}` } });
  t.is(r.status, null);
  t.like((r.shared[SHARED_KEY] as { jwt: object }).jwt, { authMethod: 'jwt', userId: 'user_kong' });
  t.deepEqual(r.authenticated, { consumer: null, credential: { id: 'user:user_kong' } });
});

test('jwt-auth: refused tokens exit 401 in shape A with a challenge and the request id; nothing runs after exit', async (t) => {
  const s = server('jwt-auth');
  const id = await s.start('jwt-auth', { issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url });
  const now = Math.floor(Date.now() / 1000);
  for (const token of [
    await issuer.sign({}, { iat: now - 4000, exp: now - 100 }),
    await issuer.sign({}, { iat: now, exp: now + 7200 }),
    await issuer.sign({}, { iss: 'https://evil.test' }),
    unsignedToken({ iss: ISSUER, aud: AUDIENCE, sub: 'user_x', iat: now, exp: now + 60 }),
  ]) {
    const r = await s.run(id, { headers: { authorization: `Bearer ${token}` } });
    t.is(r.status, 401);
    t.like(errorOf(r), { type: 'auth_error', code: 'unauthorized' });
    t.is(r.exit!.headers?.['WWW-Authenticate'], 'Bearer error="invalid_token"');
    t.regex(String(r.exit!.headers?.['X-Request-ID']), /^[0-9a-f-]{36}$/);
    t.is((JSON.parse(String(r.exit!.body)) as { error: { request_id: string } }).error.request_id, String(r.exit!.headers?.['X-Request-ID']));
    t.is(r.calls.at(-1), 'kong.response.exit');
  }
});

test('jwt-auth with anonymous (OR logic): a refused token falls back to the anonymous consumer and records the reason', async (t) => {
  const s = server('jwt-auth');
  const id = await s.start('jwt-auth', { issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, anonymous: 'anonymous' });
  const now = Math.floor(Date.now() / 1000);
  const r = await s.run(id, { headers: { authorization: `Bearer ${await issuer.sign({}, { iat: now - 4000, exp: now - 100 })}` } });
  t.is(r.status, null);
  t.deepEqual(r.authenticated, { consumer: s.kong.consumers.get('anonymous'), credential: null });
  t.like(r.shared[SHARED_KEY], { anonymous: true, failures: [{ method: 'jwt', status: 401, message: 'Token expired' }] });
});

test('jwt-auth: no token → the anonymous consumer is loaded and authenticated (OR logic)', async (t) => {
  const s = server('jwt-auth');
  const id = await s.start('jwt-auth', { issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, anonymous: 'anonymous' });
  const r = await s.run(id, { headers: {} });
  t.is(r.status, null);
  t.deepEqual(r.authenticated, { consumer: s.kong.consumers.get('anonymous'), credential: null });
  t.true(r.calls.includes('kong.client.load_consumer'));
});

test('api-key-auth: valid key → identity shared, key header cleared; invalid → 401; validator down → 503', async (t) => {
  const s = server('api-key-auth');
  const id = await s.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN });
  const key = validator.add('user_kk', 'pro');
  const ok = await s.run(id, { headers: { 'x-api-key': key.key, accept: '*/*' } });
  t.is(ok.status, null);
  t.false('x-api-key' in ok.upstreamHeaders);
  t.like((ok.shared[SHARED_KEY] as { apikey: object }).apikey, { authMethod: 'apikey', userId: 'user_kk', tier: 'pro' });
  const bad = await s.run(id, { headers: { 'x-api-key': `sk_${'Q'.repeat(32)}` } });
  t.is(bad.status, 401);
  t.like(errorOf(bad), { code: 'unauthorized' });

  const down = await s.start('api-key-auth', { validate_url: 'http://127.0.0.1:9/internal/auth/validate-api-key', timeout_ms: 300 });
  const unavailable = await s.run(down, { headers: { 'x-api-key': key.key } });
  t.is(unavailable.status, 503);
  t.like(errorOf(unavailable), { type: 'internal_error', code: 'service_unavailable' });
});

test('api-key-auth: the credential Kong logs is the key id, nothing of the key or its hash (the owner when the validator names no key id)', async (t) => {
  const s = server('api-key-auth');
  const id = await s.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN });
  const key = validator.add('user_logged', 'pro');
  const r = await s.run(id, { headers: { 'x-api-key': key.key } });
  t.is(r.status, null);
  t.deepEqual(r.authenticated, { consumer: null, credential: { id: key.keyId } });
  const credentialId = (r.authenticated!.credential as { id: string }).id;
  t.regex(credentialId, /^key_[0-9A-Za-z]+$/);
  for (const secret of [key.key, key.key.slice(3), key.hash, key.hash.slice(0, 16), key.hash.slice(-16)]) t.false(credentialId.includes(secret), `no ${secret.length}-character part of the key or its hash`);
  // The rate-limit bucket in ctx.shared (never logged) still names the key's hash: the limiter remembers keys by it.
  t.is((r.shared[SHARED_KEY] as { apikey: { bucket: string } }).apikey.bucket, `key:${key.hash}`);

  const older = validator.add('user_nokeyid');
  older.keyId = null;
  const without = await s.run(id, { headers: { 'x-api-key': older.key } });
  t.is(without.status, null);
  t.deepEqual(without.authenticated, { consumer: null, credential: { id: 'user:user_nokeyid' } });
});

test('api-key-auth: a JWT of another user in ctx.shared plus a valid key → 401', async (t) => {
  const s = server('api-key-auth');
  const id = await s.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN });
  const key = validator.add('user_one');
  const shared = { [SHARED_KEY]: { jwt: { authMethod: 'jwt', userId: 'user_two', subject: 'user_two', email: null, username: null, isGuest: false, bucket: 'user:user_two' } } };
  const r = await s.run(id, { headers: { 'x-api-key': key.key } }, shared);
  t.is(r.status, 401);
});

test('api-key-auth on Kong: a revocation published on Redis purges the plugin server cache', async (t) => {
  const s = server('api-key-auth');
  // The plugin listens on the channel its redis_prefix names, the one llm-api publishes on for that prefix.
  const prefix = `kong_${process.pid}_${Date.now().toString(36)}`;
  const channel = revocationChannelFor(prefix);
  const redis = new Redis(TEST_REDIS_URL);
  const publisher = createRedisRevocations(TEST_REDIS_URL, { channel });
  try {
    const id = await s.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN, cache_ttl_seconds: 3600, redis_url: TEST_REDIS_URL, redis_prefix: prefix });
    // The instance subscribes by itself, in the background of StartInstance. The scenario starts once
    // Redis counts that subscription on the channel: then the revocation below reaches it for sure
    // (Redis hands a message to every subscriber of the moment), and the subscription's setup
    // does not overlap the requests that fill the cache.
    const subscribers = async () => Number(((await redis.pubsub('NUMSUB', channel)) as [string, number])[1]);
    await waitFor(async () => (await subscribers()) > 0, 30_000, 'the plugin server subscribed to the revocation channel');
    t.is(await subscribers(), 1, 'one subscription for the configuration');
    const key = validator.add('user_rv');
    t.is((await s.run(id, { headers: { 'x-api-key': key.key } })).status, null);
    validator.remove(key.key);
    t.is((await s.run(id, { headers: { 'x-api-key': key.key } })).status, null, 'cached');
    await publisher.publish(key.hash);
    // Published once, to a subscriber Redis already counted: the plugin server handles the message
    // on its own, between requests, so the requests are refused from then on.
    await waitFor(async () => (await s.run(id, { headers: { 'x-api-key': key.key } })).status === 401, 30_000, 'the revocation to reach the plugin server');
    t.is((await s.run(id, { headers: { 'x-api-key': key.key } })).status, 401);
  } finally {
    await publisher.close();
    redis.disconnect();
  }
});

test('tiered-rate-limit: per-IP limit in the rewrite phase — headers on success, 429 exit with Retry-After once over', async (t) => {
  const s = server('tiered-rate-limit');
  const id = await s.start('tiered-rate-limit', { ip_per_minute: 2 }, GLOBAL);
  // The plugin server counts per fixed minute window on a clock shifted to second 1 of a window
  // (startPluginServer's clockOffsetMs): the scenario runs in that one window, without waiting.
  const ip = `198.18.${process.pid % 250}.7`;
  const first = await s.run(id, { forwardedIp: ip }, {}, 'rewrite');
  t.is(first.status, null);
  t.is(first.responseHeaders['X-RateLimit-Limit-minute'], '2');
  t.is(first.responseHeaders['X-RateLimit-Remaining-minute'], '1');
  await s.run(id, { forwardedIp: ip }, {}, 'rewrite');
  const windowEnd = Math.floor(rateLimitClock.now() / 60_000) * 60_000 + 60_000;
  const before = rateLimitClock.now();
  const over = await s.run(id, { forwardedIp: ip }, {}, 'rewrite');
  const after = rateLimitClock.now();
  t.is(over.status, 429);
  t.like(errorOf(over), { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  // The wait runs to the end of the window on the test's offset clock: the server's clock is shifted.
  const retryAfter = Number((over.exit!.headers as Record<string, string>)['Retry-After']);
  t.true(retryAfter >= Math.ceil((windowEnd - after) / 1000) && retryAfter <= Math.ceil((windowEnd - before) / 1000), `Retry-After ${retryAfter} s, ${(windowEnd - after) / 1000} s left on the offset clock`);
  // The access phase then applies the tier limits of the verified identity (free: 3/minute).
  const shared = { [SHARED_KEY]: { apikey: { authMethod: 'apikey', userId: 'u', subject: 'u', isGuest: false, tier: 'free', bucket: `key:kong-${process.pid}-${Date.now()}` } } };
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await s.run(id, { forwardedIp: `198.19.0.${i}` }, structuredClone(shared))).status);
  t.deepEqual(statuses, [null, null, null, 429]);
});

test("tiered-rate-limit + api-key-auth on Kong: a key in api-key-auth's header_name, listed in key_header_names, is seen in the rewrite phase (an exempt key over the address limit served)", async (t) => {
  const limiter = server('tiered-rate-limit');
  const auth = server('api-key-auth');
  const authId = await auth.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN, header_name: 'X-Client-Key' });
  const listed = await limiter.start('tiered-rate-limit', { ip_per_minute: 1, key_header_names: ['X-Client-Key'] }, GLOBAL);
  const unlisted = await limiter.start('tiered-rate-limit', { ip_per_minute: 1 }, GLOBAL);
  const key = validator.add('user_kong_hdr', 'enterprise');
  /** The limiter's rewrite, api-key-auth, the limiter's access: ctx.shared carried from one plugin to the next. */
  const send = async (limiterId: number, ip: string) => {
    const request = { forwardedIp: ip, headers: { 'x-client-key': key.key } };
    const rewrite = await limiter.run(limiterId, request, {}, 'rewrite');
    if (rewrite.status !== null) return { phase: 'rewrite', status: rewrite.status };
    const authenticated = await auth.run(authId, request, rewrite.shared);
    if (authenticated.status !== null) return { phase: 'auth', status: authenticated.status };
    const access = await limiter.run(limiterId, request, authenticated.shared);
    return { phase: 'access', status: access.status, deferred: 'deferredIpRefusal' in (rewrite.shared[SHARED_KEY] as object) };
  };
  const base = `198.20.${process.pid % 250}`;
  for (const [limiterId, ip] of [[listed, `${base}.1`], [unlisted, `${base}.2`]] as const) {
    t.is((await limiter.run(limiterId, { forwardedIp: ip }, {}, 'rewrite')).status, null, 'an anonymous request spends the address limit (1/minute)');
  }
  t.deepEqual(await send(listed, `${base}.1`), { phase: 'access', status: null, deferred: true }, 'the refusal put off until the key was checked, then dropped');
  t.deepEqual(await send(unlisted, `${base}.2`), { phase: 'rewrite', status: 429 }, 'an unlisted header reads as no key');
});

test('fail closed: a misconfigured instance answers 500 on every request', async (t) => {
  const s = server('jwt-auth');
  const id = await s.start('jwt-auth', { audience: AUDIENCE }); // issuer and jwks_url missing
  const r = await s.run(id, { headers: { authorization: 'Bearer a.b.c' } });
  t.is(r.status, 500);
  t.like(errorOf(r), { type: 'internal_error' });
});

test('fail closed: a PDK call that fails inside the handler answers 500, never proceeds', async (t) => {
  const s = server('api-key-auth');
  const id = await s.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN });
  const key = validator.add('user_err');
  const r = await s.run(id, { headers: { 'x-api-key': key.key }, stepErrors: ['kong.ctx.shared.get'] });
  t.is(r.status, 500);
  t.is(r.calls.at(-1), 'kong.response.exit');
  t.false(s.output().includes('unhandled exception'));
});

test('a call Lua rejects turns the request into a 500 (reproduced Kong semantics)', async (t) => {
  const s = server('identity-headers');
  const id = await s.start('identity-headers', { gateway_token: 'x' }, GLOBAL);
  const r = await s.run(id, { headers: {}, luaErrors: ['kong.service.request.set_headers'] });
  t.is(r.status, 500);
});

test('harness fidelity: raw body as bytes, multimap headers, nil as undefined (a probe plugin)', async (t) => {
  const probe = await startPluginServer(new URL('./fixtures/probe', import.meta.url).pathname);
  try {
    const id = await probe.start('probe', {});
    const r = await probe.run(id, { headers: { 'X-One': 'a', 'x-two': ['b', 'c'] }, rawBody: new TextEncoder().encode('{"prompt":"hé"}') });
    t.is(r.status, null);
    t.deepEqual(r.upstreamHeaders['x-body-type'], ['bytes']);
    t.deepEqual(r.upstreamHeaders['x-body'], ['{"prompt":"hé"}']);
    t.deepEqual(JSON.parse(r.upstreamHeaders['x-headers-shape']![0]!), { 'x-one': ['a'], 'x-two': ['b', 'c'] });
    t.deepEqual(r.upstreamHeaders['x-missing'], ['undefined']);
    t.deepEqual(r.upstreamHeaders['x-unknown'], ['undefined']);
    t.true(r.logs.includes('[kong] could not find pdk method: kong.nonexistent.thing'));
    t.deepEqual(r.upstreamHeaders['x-config-seq'], ['number']);
    // kong.ctx.shared is a Lua table: a nil is no entry (a null field reads back absent, a nil value
    // removes the key), and a list with a hole comes back as a map keyed by position.
    t.deepEqual(JSON.parse(r.upstreamHeaders['x-shared']![0]!), { kept: 'a', nested: [], list: ['x', 'y'], holed: { '1': 'x', '3': 'z' } });
    t.deepEqual(r.upstreamHeaders['x-shared-nil'], ['undefined']);
    t.false('probe_nil' in r.shared);
  } finally {
    await probe.stop();
  }
});

test('harness fidelity: an instance gets the configuration Kong builds (its scope keys, __key__, __seq__, __plugin_id; no null fields)', async (t) => {
  const probe = await startPluginServer(new URL('./fixtures/probe', import.meta.url).pathname);
  const configOf = async (scope?: KongScope) => {
    const r = await probe.run(await probe.start('probe', { header: 'x-h', unset: null, nested: { unset: null, kept: 1 } }, scope), { headers: {} });
    return JSON.parse(r.upstreamHeaders['x-config']![0]!) as Record<string, unknown>;
  };
  try {
    // By default a named plugin on a service (the auth plugins' place in deck/kong.yaml).
    const onService = await configOf();
    t.like(onService, { header: 'x-h', nested: { kept: 1 }, service_id: SERVICE_SCOPED.service, plugin_instance_name: SERVICE_SCOPED.instanceName });
    t.deepEqual(Object.keys(onService).sort(), ['__key__', '__plugin_id', '__seq__', 'header', 'nested', 'plugin_instance_name', 'service_id']);
    t.deepEqual(onService.nested, { kept: 1 }, 'Kong drops null fields at any depth');
    t.is(onService.__key__, `plugins:probe::${SERVICE_SCOPED.service}:::${DEFAULT_WORKSPACE_ID}`);
    // A global plugin gets no scope key (a Lua nil is no JSON key); a route's plugin its route_id and ordering.
    const global = await configOf(GLOBAL);
    t.deepEqual(Object.keys(global).sort(), ['__key__', '__plugin_id', '__seq__', 'header', 'nested']);
    t.is(global.__key__, `plugins:probe:::::${DEFAULT_WORKSPACE_ID}`);
    const route = 'a0b1c2d3-0000-4000-8000-000000000001';
    const onRoute = await configOf({ route, ordering: { before: { access: ['cors'] } } });
    t.like(onRoute, { route_id: route, ordering: { before: { access: ['cors'] } } });
    t.false('service_id' in onRoute);
    t.true((onRoute.__seq__ as number) > (global.__seq__ as number), 'one sequence across instances');
  } finally {
    await probe.stop();
  }
});

test('a configuration whose gateway_token is a vault reference runs: the "$refs" Kong sends beside it is not a field', async (t) => {
  const s = server('identity-headers');
  // Kong resolves `{vault://env/gw-secret}` into the field and records the reference in `$refs`.
  const id = await s.start('identity-headers', { gateway_token: 'gw-from-vault', $refs: { gateway_token: '{vault://env/gw-secret}' } }, GLOBAL);
  const r = await s.run(id, { headers: { 'x-user-id': 'admin' } });
  t.is(r.status, null, 'proxied, not the 500 of a misconfigured instance');
  t.deepEqual(r.upstreamHeaders['x-gateway-token'], ['gw-from-vault']);
  t.false('x-user-id' in r.upstreamHeaders);
});

test('a repeated Authorization reaches the upstream as its first line only; a repeated X-Request-ID is replaced (as on the embedded edge)', async (t) => {
  const s = server('identity-headers');
  const id = await s.start('identity-headers', { gateway_token: 'gw' }, GLOBAL);
  const r = await s.run(id, { headers: { authorization: ['Bearer first.token.value', `Bearer sk_${'B'.repeat(32)}`], 'x-request-id': ['req-1', 'req-2'] } });
  t.is(r.status, null);
  t.deepEqual(r.upstreamHeaders.authorization, ['Bearer first.token.value']);
  t.not(r.upstreamHeaders['x-request-id']?.[0], 'req-1');
  t.regex(r.upstreamHeaders['x-request-id']![0]!, /^[0-9a-f-]{36}$/);
});
