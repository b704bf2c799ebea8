import test from 'ava';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import { applySchema, SchemaError, type KongFieldEntry } from '../../plugins/core/kong-schema.js';
import { parseIdentityHeadersConfig } from '../../plugins/identity-headers/schema.js';
import { parseJwtAuthConfig } from '../../plugins/jwt-auth/schema.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';

// Kong validates a plugin configuration with its own schema code (kong/db/schema/init.lua), in
// which a string field without `len_min` refuses the empty string ("empty strings are not accepted
// by default": `len_min` 1), for fields, set and array elements and map keys alike. The embedded
// gateway configures the same cores through `applySchema`: it must refuse what Kong refuses, or one
// decK file means one thing on Kong (refused) and another in the embedded edge (an `anonymous: ''`
// that silently turns the OR logic off, a `gateway_token: ''` that sends no token, a `user_tier: ''`
// that puts every token user on the default key tier).

const JWT = { issuer: 'https://issuer.test', audience: 'ai-gateway', jwks_url: 'https://issuer.test/jwks' };

test('an empty string is refused as Kong refuses it, naming the field', (t) => {
  const cases: Array<[string, () => unknown, string]> = [
    ['jwt-auth anonymous', () => parseJwtAuthConfig({ ...JWT, anonymous: '' }), 'config.anonymous'],
    ['jwt-auth issuer', () => parseJwtAuthConfig({ ...JWT, issuer: '' }), 'config.issuer'],
    ['api-key-auth gateway_token', () => parseApiKeyAuthConfig({ validate_url: 'http://v.test/x', gateway_token: '' }), 'config.gateway_token'],
    ['api-key-auth header_name', () => parseApiKeyAuthConfig({ validate_url: 'http://v.test/x', header_name: '' }), 'config.header_name'],
    ['identity-headers gateway_token', () => parseIdentityHeadersConfig({ gateway_token: '' }), 'config.gateway_token'],
    ['identity-headers strip_headers element', () => parseIdentityHeadersConfig({ strip_headers: ['x-api-key', ''] }), 'config.strip_headers[1]'],
    ['tiered-rate-limit user_tier', () => parseTieredRateLimitConfig({ user_tier: '' }), 'config.user_tier'],
    ['tiered-rate-limit tiers key', () => parseTieredRateLimitConfig({ tiers: { '': { minute: 1 } } }), 'config.tiers.<key>'],
  ];
  for (const [what, parse, path] of cases) {
    const error = t.throws(parse, { instanceOf: SchemaError }, what);
    t.is(error?.path, path, what);
  }
});

test('a field that declares its own len_min keeps it (0 allows the empty string, as in Kong)', (t) => {
  const fields: KongFieldEntry[] = [{ suffix: { type: 'string', len_min: 0 } }, { name: { type: 'string', len_min: 3 } }];
  t.deepEqual(applySchema(fields, { suffix: '' }), { suffix: '' });
  t.throws(() => applySchema(fields, { name: 'ab' }), { message: 'config.name: length must be at least 3' });
  t.deepEqual(applySchema(fields, { name: 'abc' }), { name: 'abc' });
});

test('non-empty strings and absent optional strings are still accepted', (t) => {
  t.like(parseJwtAuthConfig({ ...JWT, anonymous: 'anonymous' }), { anonymous: 'anonymous' });
  t.false('anonymous' in parseJwtAuthConfig(JWT));
  t.like(parseTieredRateLimitConfig({}), { user_tier: 'pro', exempt_paths: [] });
});
