import test from 'ava';
import { offsetToNextMinute } from '../../services/kit/clock.js';
import { GLOBAL, startPluginServers, type KongScope } from '../kong/harness.js';
import { AUDIENCE, ISSUER, startFakeIssuer, startFakeValidator } from './fakes.js';

// The compiled plugins in the real kong-js-pluginserver (kong-pdk 0.6.0), started the way Kong
// starts them: with the keys Kong's plugins iterator adds to every configuration
// (kong/runloop/plugins_iterator.lua, `get_plugin_config`), and once per nginx worker.
const TOKEN = 'g'.repeat(40);
const PLUGINS = ['jwt-auth', 'api-key-auth', 'identity-headers', 'tiered-rate-limit'];
let plugins: Awaited<ReturnType<typeof startPluginServers>>;
let issuer: Awaited<ReturnType<typeof startFakeIssuer>>;
let validator: Awaited<ReturnType<typeof startFakeValidator>>;

test.before(async () => {
  issuer = await startFakeIssuer();
  validator = await startFakeValidator(TOKEN);
  // The rate limiter's clock at second 1 of a minute window: its scenario runs in one window.
  plugins = await startPluginServers(PLUGINS, { clockOffsetMs: offsetToNextMinute() });
});

test.after.always(async () => {
  await plugins?.stop();
  await issuer?.close();
  await validator?.close();
});

const server = (name: string) => plugins.server(name);

/**
 * A plugin configured on a route and a service, named and ordered: the harness sends every key
 * Kong adds for that (route_id, service_id, plugin_instance_name, ordering, __key__, __seq__, __plugin_id).
 */
const ROUTE_AND_SERVICE: KongScope = {
  route: '3b1c2a4e-0000-4000-8000-00000000000a',
  service: '3b1c2a4e-0000-4000-8000-00000000000b',
  instanceName: 'llm-api-auth',
  ordering: { before: { access: ['cors'] } },
};

test.serial('a route- or service-scoped instance: the keys Kong adds to its configuration are not configuration errors', async (t) => {
  const identity = server('identity-headers');
  const headers = await identity.run(await identity.start('identity-headers', { gateway_token: 'gw-scoped' }, ROUTE_AND_SERVICE), { headers: { 'x-user-id': 'admin' } });
  t.is(headers.status, null, 'proxied, not the 500 of a misconfigured instance');
  t.deepEqual(headers.upstreamHeaders['x-gateway-token'], ['gw-scoped']);
  t.false('x-user-id' in headers.upstreamHeaders);

  const jwt = server('jwt-auth');
  const jwtId = await jwt.start('jwt-auth', { issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, anonymous: 'anonymous' }, ROUTE_AND_SERVICE);
  const token = await issuer.sign({}, { sub: 'user_scoped' });
  const verified = await jwt.run(jwtId, { headers: { authorization: `Bearer ${token}` } });
  t.is(verified.status, null);
  t.deepEqual(verified.authenticated, { consumer: null, credential: { id: 'user:user_scoped' } });

  const keys = server('api-key-auth');
  const key = validator.add('user_scoped_key', 'pro');
  const accepted = await keys.run(await keys.start('api-key-auth', { validate_url: validator.url, gateway_token: TOKEN }, ROUTE_AND_SERVICE), { headers: { 'x-api-key': key.key } });
  t.is(accepted.status, null);
  t.false('x-api-key' in accepted.upstreamHeaders);

  // The guest-login route's own limiter instance (route-scoped, access phase).
  const limiter = server('tiered-rate-limit');
  const limited = await limiter.run(await limiter.start('tiered-rate-limit', { ip_per_minute: 0, ip_per_hour: 5, ip_limit_phase: 'access' }, ROUTE_AND_SERVICE), { forwardedIp: '198.51.100.20' });
  t.is(limited.status, null);
});

test.serial("Kong's own identity headers a client sends (X-Consumer-*, X-Credential-Identifier, X-Authenticated-*) do not reach the service", async (t) => {
  const identity = server('identity-headers');
  const spoofed = {
    'X-Consumer-ID': 'c0ffee00-0000-4000-8000-000000000001',
    'X-Consumer-Custom-ID': 'admin',
    'X-Consumer-Username': 'admin',
    'X-Credential-Identifier': 'admin-key',
    'X-Anonymous-Consumer': 'false',
    'X-Authenticated-Groups': 'admins',
    'X-Authenticated-Scope': 'admin',
    'X-Authenticated-Userid': 'admin',
  };
  const r = await identity.run(await identity.start('identity-headers', { gateway_token: 'gw-kong-headers' }, GLOBAL), { headers: { ...spoofed, accept: 'application/json' } });
  t.is(r.status, null);
  for (const name of Object.keys(spoofed)) t.false(name.toLowerCase() in r.upstreamHeaders, name);
  t.deepEqual(r.upstreamHeaders['accept'], ['application/json']);
  // Beside Kong's bundled auth plugins (which set them before this plugin runs) they are left alone.
  const mixed = await identity.run(await identity.start('identity-headers', { gateway_token: 'gw-kong-headers', strip_kong_consumer_headers: false }, GLOBAL), { headers: spoofed });
  t.deepEqual(mixed.upstreamHeaders['x-consumer-id'], [spoofed['X-Consumer-ID']]);
});

test.serial('a field of no schema is still refused: only the keys Kong adds are set aside', async (t) => {
  const identity = server('identity-headers');
  const r = await identity.run(await identity.start('identity-headers', { gateway_tokn: 'typo' }, ROUTE_AND_SERVICE), { headers: {} });
  t.is(r.status, 500);
  t.regex(String(r.exit!.body), /misconfigured/);
  t.regex(identity.output(), /config\.gateway_tokn: unknown field/);
});

test.serial('a route-, service- or consumer-scoped limiter on the default rewrite phase counts the address in its access phase (Kong runs no other for it)', async (t) => {
  const limiter = server('tiered-rate-limit');
  const scopes: Record<string, KongScope> = {
    route: { route: '3b1c2a4e-0000-4000-8000-0000000000d1' },
    service: { service: '3b1c2a4e-0000-4000-8000-0000000000d2' },
    consumer: { consumer: '3b1c2a4e-0000-4000-8000-0000000000d3' },
  };
  for (const [where, scope] of Object.entries(scopes)) {
    // A prefix per scope: each instance its own counters whatever the plugin server shares.
    const id = await limiter.start('tiered-rate-limit', { ip_per_minute: 2, policy: 'local', redis_prefix: `scoped-${where}` }, scope);
    const ip = `198.51.100.${(process.pid % 200) + 40}`;
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await limiter.run(id, { forwardedIp: ip }, {}, 'access'));
    t.deepEqual(results.map((r) => r.status), [null, null, 429], where);
    t.is(results[0]!.responseHeaders['X-RateLimit-Remaining-minute'], '1', where);
  }
  // A global instance keeps the configured phase: its access phase leaves the address to the rewrite.
  const global = await limiter.start('tiered-rate-limit', { ip_per_minute: 1, policy: 'local', redis_prefix: 'scoped-global' }, GLOBAL);
  const ip = `198.51.100.${(process.pid % 200) + 41}`;
  for (let i = 0; i < 3; i++) t.is((await limiter.run(global, { forwardedIp: ip }, {}, 'access')).status, null);
});

test.serial('one instance per nginx worker: the per-address limit is counted once across them, not once per worker', async (t) => {
  const limiter = server('tiered-rate-limit');
  // Kong's workers each start an instance of the same global plugin (one id, each its own __seq__).
  const config = { ip_per_minute: 2, policy: 'local' };
  const plugin: KongScope = { ...GLOBAL, pluginId: '3b1c2a4e-0000-4000-8000-0000000000c1' };
  const workers = [await limiter.start('tiered-rate-limit', config, plugin), await limiter.start('tiered-rate-limit', config, plugin)];
  t.not(workers[0], workers[1]);
  const ip = `198.51.100.${(process.pid % 200) + 30}`;
  const statuses: Array<number | null> = [];
  for (const worker of [workers[0]!, workers[1]!, workers[0]!, workers[1]!]) statuses.push((await limiter.run(worker, { forwardedIp: ip }, {}, 'rewrite')).status);
  t.deepEqual(statuses, [null, null, 429, 429]);
});

test.serial('one instance per nginx worker: a key validated through one is known to the others (one cache, not one per worker)', async (t) => {
  const keys = server('api-key-auth');
  const config = { validate_url: validator.url, gateway_token: TOKEN, cache_ttl_seconds: 3600, header_name: 'x-api-key-workers' };
  const plugin: KongScope = { service: '3b1c2a4e-0000-4000-8000-00000000000b', pluginId: '3b1c2a4e-0000-4000-8000-0000000000c2' };
  const [first, second] = [await keys.start('api-key-auth', config, plugin), await keys.start('api-key-auth', config, plugin)];
  const key = validator.add('user_workers', 'pro');
  const before = validator.calls;
  t.is((await keys.run(first!, { headers: { 'x-api-key-workers': key.key } })).status, null);
  t.is((await keys.run(second!, { headers: { 'x-api-key-workers': key.key } })).status, null);
  t.is(validator.calls - before, 1, 'the second worker found the key in the shared cache');
});
