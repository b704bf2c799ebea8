import test from 'ava';
import { parseApiKeyAuthConfig, Schema as apiKeySchema } from '../../plugins/api-key-auth/schema.js';
import { applySchema, SchemaError, type KongFieldEntry } from '../../plugins/core/kong-schema.js';
import type { EdgeRequest, VerifiedIdentity } from '../../plugins/core/types.js';
import { parseJwtAuthConfig, Schema as jwtSchema } from '../../plugins/jwt-auth/schema.js';
import { createTieredRateLimit } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';

// A configuration mistake a platform team makes on its own Kong must be refused when the
// configuration is checked (decK sync, the Admin API, the embedded edge's start), naming the field,
// never discovered later as a 503 on every request or, worse, as a limit that silently holds no one.

const JWT = { issuer: 'https://issuer.test', audience: 'ai-gateway' };
const T0 = Date.UTC(2026, 10, 22, 10, 0, 10);

test('jwt-auth: a jwks_url that is no http(s) URL is refused at configuration, naming the field', (t) => {
  for (const jwks_url of ['not a url', 'issuer.test/jwks', 'ftp://issuer.test/jwks', 'file:///etc/jwks.json', 'http://', 'https:// issuer.test/jwks']) {
    const error = t.throws(() => parseJwtAuthConfig({ ...JWT, jwks_url }), { instanceOf: SchemaError }, jwks_url);
    t.is(error?.path, 'config.jwks_url', jwks_url);
  }
  t.is(parseJwtAuthConfig({ ...JWT, jwks_url: 'http://keycloak:8080/realms/r/protocol/openid-connect/certs' }).jwks_url, 'http://keycloak:8080/realms/r/protocol/openid-connect/certs');
  t.is(parseJwtAuthConfig({ ...JWT, jwks_url: 'HTTPS://issuer.test/jwks' }).jwks_url, 'HTTPS://issuer.test/jwks');
});

test('jwt-auth: an empty algorithm list (no token could ever pass) is refused at configuration, as Kong refuses it (len_min)', (t) => {
  const jwks_url = 'https://issuer.test/jwks';
  const error = t.throws(() => parseJwtAuthConfig({ ...JWT, jwks_url, algorithms: [] }), { instanceOf: SchemaError });
  t.is(error?.path, 'config.algorithms');
  t.deepEqual(parseJwtAuthConfig({ ...JWT, jwks_url, algorithms: ['ES256'] }).algorithms, ['ES256']);
  t.is(jwtSchema.find((entry) => 'algorithms' in entry)!.algorithms!.len_min, 1);
});

test('jwt-auth: a JWKS refresh cool-down of 0 (a fetch per request for unknown kids) is refused at configuration, as Kong refuses it (between)', (t) => {
  const jwks_url = 'https://issuer.test/jwks';
  for (const jwks_refresh_cooldown_seconds of [0, -1]) {
    const error = t.throws(() => parseJwtAuthConfig({ ...JWT, jwks_url, jwks_refresh_cooldown_seconds }), { instanceOf: SchemaError }, String(jwks_refresh_cooldown_seconds));
    t.is(error?.path, 'config.jwks_refresh_cooldown_seconds');
  }
  t.is(parseJwtAuthConfig({ ...JWT, jwks_url, jwks_refresh_cooldown_seconds: 1 }).jwks_refresh_cooldown_seconds, 1);
  t.deepEqual(jwtSchema.find((entry) => 'jwks_refresh_cooldown_seconds' in entry)!.jwks_refresh_cooldown_seconds!.between, [1, 86400]);
});

test('api-key-auth: a validate_url that is no http(s) URL is refused at configuration, naming the field', (t) => {
  for (const validate_url of ['nope', 'llm-api:8080/internal/auth/validate-api-key', 'redis://v.test/x', 'http://']) {
    const error = t.throws(() => parseApiKeyAuthConfig({ validate_url }), { instanceOf: SchemaError }, validate_url);
    t.is(error?.path, 'config.validate_url', validate_url);
  }
  t.is(parseApiKeyAuthConfig({ validate_url: 'http://127.0.0.1:8080/internal/auth/validate-api-key' }).validate_url, 'http://127.0.0.1:8080/internal/auth/validate-api-key');
});

test('the URL fields carry a `match` Kong checks itself (decK sync and the Admin API refuse a bad URL)', (t) => {
  // What Kong's schema code checks from the Schema the plugin server reports: a Lua pattern.
  const jwksField = jwtSchema.find((entry) => 'jwks_url' in entry)!.jwks_url!;
  const validateField = apiKeySchema.find((entry) => 'validate_url' in entry)!.validate_url!;
  t.is(jwksField.match, '^[Hh][Tt][Tt][Pp][Ss]?://[^%s/]');
  t.is(validateField.match, '^[Hh][Tt][Tt][Pp][Ss]?://[^%s/]');
});

test('applySchema honours `match` as Kong does (a Lua pattern), and refuses a pattern it cannot read the same way', (t) => {
  const fields: KongFieldEntry[] = [{ url: { type: 'string', match: '^[Hh][Tt][Tt][Pp][Ss]?://[^%s/]' } }, { code: { type: 'string', match: '^%d%d%-%a+$' } }];
  t.deepEqual(applySchema(fields, { url: 'https://x', code: '42-ab' }), { url: 'https://x', code: '42-ab' });
  t.throws(() => applySchema(fields, { url: 'https:// x' }), { message: 'config.url: must match ^[Hh][Tt][Tt][Pp][Ss]?://[^%s/]' });
  t.throws(() => applySchema(fields, { code: '4a-ab' }), { message: /config\.code: must match/ });
  // `-` (Lua's lazy repetition), `%b`, `%f` and captures have no exact JavaScript equivalent here.
  t.throws(() => applySchema([{ x: { type: 'string', match: 'a-b' } }], { x: 'ab' }), { message: /unsupported Lua pattern/ });
  t.throws(() => applySchema([{ x: { type: 'string', match: '(a)' } }], { x: 'a' }), { message: /unsupported Lua pattern/ });
});

test('tiered-rate-limit: a user, guest, unverified or default key tier that `tiers` does not define is refused, naming the field', (t) => {
  const tiers = { basic: { minute: 1 }, premium: { minute: 100 } };
  const named = { user_tier: 'premium', guest_tier: 'basic', default_key_tier: 'basic' };
  t.notThrows(() => parseTieredRateLimitConfig({ tiers, ...named }));
  t.notThrows(() => parseTieredRateLimitConfig({ tiers, ...named, unverified_user_tier: 'basic' }));
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ tiers }, 'config.user_tier'], // the defaults (pro, free) name tiers this map does not hold
    [{ tiers, ...named, user_tier: 'pro' }, 'config.user_tier'],
    [{ tiers, ...named, guest_tier: 'free' }, 'config.guest_tier'],
    [{ tiers, ...named, default_key_tier: 'free' }, 'config.default_key_tier'],
    [{ tiers, ...named, unverified_user_tier: 'unverified' }, 'config.unverified_user_tier'],
    [{ user_tier: 'constructor' }, 'config.user_tier'],
    [{ default_key_tier: 'toString' }, 'config.default_key_tier'],
  ];
  for (const [config, path] of cases) {
    const error = t.throws(() => parseTieredRateLimitConfig(config), { instanceOf: SchemaError }, path);
    t.is(error?.path, path);
  }
});

const tokenUser = (): VerifiedIdentity => ({ authMethod: 'jwt', userId: 'user_t', subject: 'user_t', email: null, username: null, isGuest: false, bucket: 'user:user_t' });
const keyOfTier = (tier: string): VerifiedIdentity => ({
  authMethod: 'apikey',
  userId: 'user_k',
  subject: 'user_k',
  email: null,
  username: null,
  isGuest: false,
  tier,
  limits: null,
  bucket: 'key:0123',
});
const request = (identity: VerifiedIdentity): EdgeRequest => ({
  method: 'GET',
  path: '/v1/models',
  headers: {},
  clientIp: '10.9.0.1',
  shared: identity.authMethod === 'jwt' ? { jwt: identity } : { apikey: identity },
});

function statuses(config: Record<string, unknown>, identity: () => VerifiedIdentity, count: number): Array<number> {
  const core = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 0, ...config }), { store: createLocalStore(), clock: new ManualClock(T0) });
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const decision = core.access(request(identity()));
    if (decision instanceof Promise) throw new Error('the local store answers synchronously');
    out.push(decision.kind === 'respond' ? decision.status : 200);
  }
  return out;
}

test('tiered-rate-limit: a key whose tier names a property every object has (constructor, toString) gets the default key tier, not no limit', (t) => {
  // free (the default key tier): 3 a minute.
  for (const tier of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
    t.deepEqual(statuses({}, () => keyOfTier(tier), 4), [200, 200, 200, 429], tier);
  }
  // An unknown tier of an ordinary name behaves the same (the reference).
  t.deepEqual(statuses({}, () => keyOfTier('team'), 4), [200, 200, 200, 429]);
  // A tier the map does define still applies.
  t.deepEqual(statuses({ tiers: { free: { minute: 3 }, constructor: { minute: 1 } }, user_tier: 'free' }, () => keyOfTier('constructor'), 2), [200, 429]);
  t.deepEqual(statuses({ tiers: { free: { minute: 1 } }, user_tier: 'free', guest_tier: 'free' }, tokenUser, 2), [200, 429]);
});
