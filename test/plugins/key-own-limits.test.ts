import test from 'ava';
import { randomBytes } from 'node:crypto';
import type { Decision, EdgeRequest, TierLimits, VerifiedIdentity } from '../../plugins/core/types.js';
import { createTieredRateLimit, HEADERS } from '../../plugins/tiered-rate-limit/core.js';
import { ownKeyLimits, periodLimits } from '../../plugins/tiered-rate-limit/key-limits.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ownLimitsOf } from '../../plugins/api-key-auth/validator.js';
import { effectiveLimits } from '../../services/llm-api/identity/api-keys/tiers.js';
import { ManualClock } from '../../services/kit/clock.js';

// Limits an administrator sets on a key (POST/PATCH /v1/admin/api-keys) are enforced on keys of
// every tier, in place of the tier's. The validator reports them apart (`custom_limits`) beside the
// key's effective limits, so the edge's tier settings keep governing every period nobody set.

const T0 = Date.UTC(2026, 10, 22, 10, 0, 10);

/** A key as api-key-auth builds it from the validator's answer for `tier` with these admin-set limits. */
function keyWith(tier: 'free' | 'pro' | 'enterprise', custom: Parameters<typeof effectiveLimits>[1], userId = `user_${randomBytes(4).toString('hex')}`): VerifiedIdentity {
  return {
    authMethod: 'apikey',
    userId,
    subject: userId,
    email: null,
    username: null,
    isGuest: false,
    tier,
    limits: ownLimitsOf({ user_id: userId, limits: effectiveLimits(tier, custom) as never, custom_limits: custom as never }),
    bucket: `key:${randomBytes(8).toString('hex')}`,
  };
}
const request = (identity: VerifiedIdentity): EdgeRequest => ({ method: 'GET', path: '/v1/models', headers: {}, clientIp: '192.0.2.9', shared: { apikey: identity } });
const headersOf = (d: Decision) => (d.kind === 'respond' ? d.headers : d.responseHeaders) ?? {};

function limiter(overrides: Record<string, unknown> = {}) {
  const clock = new ManualClock(T0);
  const core = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 0, ...overrides }), { store: createLocalStore(), clock });
  return { core, clock };
}

async function acceptedOf(core: ReturnType<typeof limiter>['core'], identity: VerifiedIdentity, attempts: number): Promise<number> {
  let accepted = 0;
  for (let i = 0; i < attempts; i++) if ((await core.access(request(identity))).kind === 'continue') accepted++;
  return accepted;
}

test("the key's own limits come from the validator's custom_limits when it reports them, else from its limits", (t) => {
  t.deepEqual(ownLimitsOf({ user_id: 'u', limits: { requests_per_minute: 3, requests_per_day: 50 }, custom_limits: null }), null, 'nothing set on the key: the tier applies');
  t.deepEqual(ownLimitsOf({ user_id: 'u', limits: { requests_per_minute: 3, requests_per_day: 7 }, custom_limits: { requests_per_day: 7 } }), { minute: undefined, day: 7 });
  t.deepEqual(ownLimitsOf({ user_id: 'u', limits: { requests_per_minute: null, requests_per_day: 50 }, custom_limits: { requests_per_minute: null } }), { minute: null, day: undefined }, 'null lifts that period');
  t.deepEqual(ownLimitsOf({ user_id: 'u', limits: { minute: 9 } }), { minute: 9, day: undefined }, 'a validator that reports only the key’s own');
});

test('an admin-set limit lower than the tier is enforced on a pro key, minute and day (free keys likewise)', async (t) => {
  const { core, clock } = limiter();
  const pro = keyWith('pro', { requests_per_minute: 2, requests_per_day: 5 });
  const first = await core.access(request(pro));
  t.is(headersOf(first)[HEADERS.limit], '2', 'the tightest window is the key’s own');
  t.is(await acceptedOf(core, pro, 5), 1, 'two a minute');
  clock.advance(60_000);
  t.is(await acceptedOf(core, pro, 5), 2);
  clock.advance(60_000);
  t.is((await core.access(request(pro))).kind, 'continue', 'the fifth of the day');
  const refused = await core.access(request(pro));
  t.is(refused.kind === 'respond' ? refused.status : 0, 429);
  t.like((refused as { body: { error: object } }).body.error, { code: 'insufficient_quota' }, 'five a day');

  const free = keyWith('free', { requests_per_minute: 1 });
  t.is(await acceptedOf(core, free, 3), 1);
});

test('an admin-set limit higher than the tier (or none) is what the key is held to', async (t) => {
  const { core } = limiter();
  t.is(await acceptedOf(core, keyWith('free', { requests_per_minute: 10 }), 15), 10, 'a free key raised to 10 a minute');
  t.is(await acceptedOf(core, keyWith('pro', { requests_per_minute: null }), 100), 100, 'a pro key without a minute limit');
  t.is(await acceptedOf(core, keyWith('pro', null), 100), 60, 'a pro key nobody set limits on');
  const relaxed = limiter({ tiers: { enterprise: { minute: 5 } }, user_tier: 'enterprise', guest_tier: 'enterprise', default_key_tier: 'enterprise' });
  t.is(await acceptedOf(relaxed.core, keyWith('enterprise', { requests_per_minute: 10 }), 15), 10, 'above an enterprise tier limit too');
});

test("keys nobody set limits on follow the edge's tier settings, raised or lowered", async (t) => {
  const raised = limiter({ tiers: { free: { minute: 10, day: 100 }, pro: { minute: 200, day: 1000 } } });
  t.is(await acceptedOf(raised.core, keyWith('free', null), 15), 10, 'nothing set on the key: the edge’s raised tier applies');
  t.is(await acceptedOf(raised.core, keyWith('pro', null), 250), 200);
  const lowered = limiter({ tiers: { pro: { minute: 2, day: 1000 } }, guest_tier: 'pro', default_key_tier: 'pro' });
  t.is(await acceptedOf(lowered.core, keyWith('pro', null), 5), 2);
});

test('a lowered key has a counter of its own: other credentials of its user keep the tier, and still share the user budget', async (t) => {
  const { core } = limiter({ tiers: { free: { minute: 3, day: 50 } }, user_tier: 'free' });
  const userId = `user_${randomBytes(4).toString('hex')}`;
  const throttled = keyWith('free', { requests_per_minute: 1 }, userId);
  const plain = keyWith('free', null, userId);
  t.is(await acceptedOf(core, throttled, 3), 1);
  t.is(await acceptedOf(core, plain, 5), 2, "the user's budget (3) minus the throttled key's one request");
});

test('custom_limit_tiers narrows which tiers take limits from the key', async (t) => {
  const { core } = limiter({ custom_limit_tiers: ['enterprise'] });
  t.is(await acceptedOf(core, keyWith('pro', { requests_per_minute: 2 }), 5), 5);
  t.deepEqual(parseTieredRateLimitConfig({}).custom_limit_tiers, ['free', 'pro', 'enterprise'], 'every tier by default');
});

test('ownKeyLimits and periodLimits', (t) => {
  const reported = (minute: TierLimits['minute'], day: TierLimits['day']): TierLimits => ({ minute, day });
  t.deepEqual(ownKeyLimits(reported(2, undefined)), { minute: 2, day: undefined });
  t.deepEqual(ownKeyLimits(reported(null, 5)), { minute: null, day: 5 });
  t.deepEqual(ownKeyLimits(reported(0, 2.5)), { minute: undefined, day: undefined }, 'not a limit the validator could have set');
  t.deepEqual(ownKeyLimits(null), { minute: undefined, day: undefined });
  t.deepEqual(periodLimits(60, undefined), { user: 60, key: null });
  t.deepEqual(periodLimits(60, 2), { user: 60, key: 2 });
  t.deepEqual(periodLimits(60, 600), { user: 600, key: null });
  t.deepEqual(periodLimits(60, null), { user: null, key: null });
  t.deepEqual(periodLimits(null, 5), { user: null, key: 5 });
  t.deepEqual(periodLimits(0, 5), { user: null, key: 5 }, 'a tier period of 0 is no limit');
});
