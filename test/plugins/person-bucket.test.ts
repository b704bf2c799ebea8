import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import type { Decision, EdgeRequest, VerifiedIdentity } from '../../plugins/core/types.js';
import { createTieredRateLimit } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from '../gateway/edge-harness.js';

// With an external issuer (Keycloak) a user's tokens carry the issuer's id as `sub`, while the key
// validator reports the owner of the user's keys as the platform id (`user_…`), with the token's id
// as `subject`. The edge must see one person either way: one rate-limit budget, and a token and a
// key of that person accepted together.

const T0 = Date.UTC(2026, 10, 22, 10, 0, 10);
const keycloakId = () => `${randomBytes(4).toString('hex')}-0000-4000-8000-${randomBytes(6).toString('hex')}`;

const tokenOf = (sub: string): VerifiedIdentity => ({
  authMethod: 'jwt',
  userId: sub,
  subject: sub,
  email: null,
  username: null,
  isGuest: false,
  emailVerified: null,
  bucket: `user:${sub}`,
});
const keyOf = (userId: string, subject: string, tier = 'free'): VerifiedIdentity => ({
  authMethod: 'apikey',
  userId,
  subject,
  email: null,
  username: null,
  isGuest: false,
  tier,
  limits: null,
  bucket: `key:${randomBytes(8).toString('hex')}`,
});
const request = (shared: EdgeRequest['shared'], headers: EdgeRequest['headers'] = {}): EdgeRequest => ({ method: 'GET', path: '/v1/models', headers, clientIp: '192.0.2.7', shared });

test('tiered-rate-limit: a token (sub = the issuer id) and a key (user_id = the platform id, subject = that sub) draw on one budget', async (t) => {
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 0, user_tier: 'free' }), { store: createLocalStore(), clock: new ManualClock(T0) });
  const sub = keycloakId();
  const token = tokenOf(sub);
  const key = keyOf(`user_${randomBytes(6).toString('hex')}`, sub);
  const answers: string[] = [];
  for (let i = 0; i < 4; i++) answers.push(`jwt:${(await limiter.access(request({ jwt: token }))).kind}`);
  for (let i = 0; i < 4; i++) answers.push(`key:${(await limiter.access(request({ apikey: key }))).kind}`);
  t.deepEqual(answers, ['jwt:continue', 'jwt:continue', 'jwt:continue', 'jwt:respond', 'key:respond', 'key:respond', 'key:respond', 'key:respond'], 'free: 3 a minute for the person, whichever credential');

  // Another person's key (another subject) keeps a budget of its own, even under the same platform id's neighbour.
  const other = keyOf(`user_${randomBytes(6).toString('hex')}`, keycloakId());
  t.is((await limiter.access(request({ apikey: other }))).kind, 'continue');
  await limiter.close!();
});

test('tiered-rate-limit: a key whose validator reports no subject is counted under its user id (embedded issuer: the same id as its tokens)', async (t) => {
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 0, user_tier: 'free' }), { store: createLocalStore(), clock: new ManualClock(T0) });
  const userId = `user_${randomBytes(6).toString('hex')}`;
  const kinds: string[] = [];
  for (let i = 0; i < 2; i++) kinds.push((await limiter.access(request({ jwt: tokenOf(userId) }))).kind);
  for (let i = 0; i < 2; i++) kinds.push((await limiter.access(request({ apikey: keyOf(userId, userId) }))).kind);
  t.deepEqual(kinds, ['continue', 'continue', 'continue', 'respond']);
  await limiter.close!();
});

function apiKeyAuthAnswering(answer: { user_id: string; subject?: string }) {
  return createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: 'http://validator.invalid/', anonymous: 'anonymous' }), {
    validate: async () => ({ kind: 'valid', key: { tier: 'pro', ...answer } }),
  });
}

const API_KEY = `sk_${'A'.repeat(32)}`;
const kindOf = (d: Decision) => (d.kind === 'respond' ? d.status : d.identity?.authMethod ?? 'continue');

test('api-key-auth: a token and a key of one person are accepted together; of two people refused', async (t) => {
  const sub = keycloakId();
  const platformId = `user_${randomBytes(6).toString('hex')}`;
  const same = apiKeyAuthAnswering({ user_id: platformId, subject: sub });
  t.is(kindOf(await same.access(request({ jwt: tokenOf(sub) }, { 'x-api-key': API_KEY }))), 'apikey', 'the key names the token’s person through its subject');

  const other = apiKeyAuthAnswering({ user_id: platformId, subject: keycloakId() });
  const refused = await other.access(request({ jwt: tokenOf(sub) }, { 'x-api-key': API_KEY }));
  t.is(kindOf(refused), 401);
  t.regex((refused as { body: { error: { message: string } } }).body.error.message, /different users/);

  // The platform id alone does not make a key the token's: the token names the issuer's id.
  const byPlatformId = apiKeyAuthAnswering({ user_id: sub, subject: keycloakId() });
  t.is(kindOf(await byPlatformId.access(request({ jwt: tokenOf(sub) }, { 'x-api-key': API_KEY }))), 401);

  // A validator that reports no subject: the key's user id is compared (the embedded issuer's tokens carry it).
  const embedded = apiKeyAuthAnswering({ user_id: platformId });
  t.is(kindOf(await embedded.access(request({ jwt: tokenOf(platformId) }, { 'x-api-key': API_KEY }))), 'apikey');
  t.is(kindOf(await embedded.access(request({ jwt: tokenOf(sub) }, { 'x-api-key': API_KEY }))), 401);
});

test('through the embedded edge: a token and a key of one external-issuer user share one budget and are accepted together', async (t) => {
  const clock = new ManualClock(Date.now());
  const edge = await startEdgeWithFakes({
    clock,
    vars: { DECK_RATE_LIMIT_IP_PER_MINUTE: '100000', DECK_RATE_LIMIT_USER_TIER: 'free', DECK_RATE_LIMIT_FREE_PER_MINUTE: '3', DECK_RATE_LIMIT_FREE_PER_DAY: '1000' },
  });
  t.teardown(() => edge.close());
  const sub = keycloakId();
  const key = edge.validator.add(`user_${randomBytes(6).toString('hex')}`, 'free', null, sub);
  const token = await edge.issuer.sign({}, { sub });
  const get = async (headers: Record<string, string>) => {
    const res = await fetch(`${edge.url}/v1/models`, { headers });
    await res.arrayBuffer();
    return res.status;
  };
  t.is(await get({ authorization: `Bearer ${token}`, 'x-api-key': key.key }), 200, 'token and key of one person: accepted');
  t.is(await get({ authorization: `Bearer ${token}` }), 200);
  t.is(await get({ 'x-api-key': key.key }), 200);
  t.is(await get({ 'x-api-key': key.key }), 429, 'the fourth request of the person this minute, whichever credential');
  t.is(await get({ authorization: `Bearer ${token}` }), 429);
  const stranger = edge.validator.add(`user_${randomBytes(6).toString('hex')}`, 'free', null, keycloakId());
  t.is(await get({ authorization: `Bearer ${token}`, 'x-api-key': stranger.key }), 401, "another person's key beside the token");
});
