import test from 'ava';
import { randomBytes } from 'node:crypto';
import type { Decision, EdgeRequest, VerifiedIdentity } from '../../plugins/core/types.js';
import { createTieredRateLimit, HEADERS } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore, createRedisStore, type CounterStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';
import { createInProcessRevocations, sha256Hex, type RevocationChannel } from '../../services/kit/core/index.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { deleteRedisKeys } from '../helpers/redis.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';

// A minute boundary plus 10 s, so windows are predictable.
const T0 = Date.UTC(2026, 10, 22, 10, 0, 10);
const PREFIX = `rltest_${process.pid}_${randomBytes(3).toString('hex')}`;
test.after.always(() => deleteRedisKeys(PREFIX));

const key = (tier: string | null, userId = 'user_k', limits: VerifiedIdentity['limits'] = null): VerifiedIdentity => ({
  authMethod: 'apikey',
  userId,
  subject: userId,
  email: null,
  username: null,
  isGuest: false,
  tier,
  limits,
  bucket: `key:${userId}-${randomBytes(4).toString('hex')}`,
});
const jwt = (guest: boolean, userId = `user_${randomBytes(4).toString('hex')}`): VerifiedIdentity => ({
  authMethod: 'jwt',
  userId,
  subject: userId,
  email: null,
  username: null,
  isGuest: guest,
  bucket: `user:${userId}`,
});
let ipCounter = 0;
const freshIp = () => `10.0.${Math.floor(++ipCounter / 250)}.${ipCounter % 250}`;
const req = (ip: string, shared: EdgeRequest['shared'] = {}): EdgeRequest => ({ method: 'GET', path: '/v1/models', headers: {}, clientIp: ip, shared });

function headersOf(d: Decision): Record<string, string> {
  return (d.kind === 'respond' ? d.headers : d.responseHeaders) ?? {};
}

const stores: Array<[string, () => Promise<CounterStore>]> = [
  ['local', async () => createLocalStore()],
  [
    'redis',
    async () => {
      const store = createRedisStore({ url: TEST_REDIS_URL, timeoutMs: 500 });
      await store.ready();
      return store;
    },
  ],
];

for (const [name, makeStore] of stores) {
  const limiter = async (overrides: Record<string, unknown> = {}) => {
    const clock = new ManualClock(T0);
    const store = await makeStore();
    const config = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_${name}_${randomBytes(3).toString('hex')}`, ...overrides });
    return { core: createTieredRateLimit(config, { store, clock }), clock, store };
  };

  test(`${name}: per-IP limit of 100/minute (rewrite phase, before authentication) with X-RateLimit-*-minute headers, then 429`, async (t) => {
    const { core, store } = await limiter();
    const ip = freshIp();
    let last: Decision | undefined;
    for (let i = 1; i <= 100; i++) {
      last = await core.rewrite!(req(ip));
      t.is(last.kind, 'continue');
    }
    t.is(headersOf(last!)[HEADERS.ipLimit], '100');
    t.is(headersOf(last!)[HEADERS.ipRemaining], '0');
    const over = await core.rewrite!(req(ip));
    t.is(over.kind === 'respond' ? over.status : 0, 429);
    t.like((over as { body: { error: object } }).body.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    t.is(headersOf(over)[HEADERS.retryAfter], '50');
    t.false(HEADERS.shouldRetry in headersOf(over));
    t.is((await core.rewrite!(req(freshIp()))).kind, 'continue', 'other addresses are not affected');
    t.deepEqual(await core.access(req(ip)), { kind: 'continue' }, 'the access phase does not count the address again');
    await store.close();
  });

  test(`${name}: free key 3/minute — 4th request 429 with tier headers; the next window (clock) allows again`, async (t) => {
    const { core, clock, store } = await limiter();
    const shared = { apikey: key('free') };
    const ip = freshIp();
    for (let i = 1; i <= 3; i++) {
      const d = await core.access(req(ip, shared));
      t.is(d.kind, 'continue');
      t.is(headersOf(d)[HEADERS.limit], '3');
      t.is(headersOf(d)[HEADERS.remaining], String(3 - i));
      t.is(headersOf(d)[HEADERS.reset], String((T0 - 10_000) / 1000 + 60));
    }
    const over = await core.access(req(ip, shared));
    t.is(over.kind === 'respond' ? over.status : 0, 429);
    t.is(headersOf(over)[HEADERS.remaining], '0');
    t.is(headersOf(over)[HEADERS.retryAfter], '50');
    clock.advance(50_000);
    t.is((await core.access(req(ip, shared))).kind, 'continue');
    await store.close();
  });

  test(`${name}: daily quota spent → 429 insufficient_quota with x-should-retry: false`, async (t) => {
    const { core, clock, store } = await limiter({ tiers: { free: { minute: 1000, day: 5 } }, user_tier: 'free' });
    const shared = { apikey: key('free') };
    for (let i = 0; i < 5; i++) t.is((await core.access(req(freshIp(), shared))).kind, 'continue');
    const over = await core.access(req(freshIp(), shared));
    t.is(over.kind === 'respond' ? over.status : 0, 429);
    t.like((over as { body: { error: object } }).body.error, { code: 'insufficient_quota' });
    t.is(headersOf(over)[HEADERS.shouldRetry], 'false');
    t.true(Number(headersOf(over)[HEADERS.retryAfter]) > 60);
    clock.set(Date.UTC(2026, 10, 23, 0, 0, 1));
    t.is((await core.access(req(freshIp(), shared))).kind, 'continue', 'a new UTC day resets the quota');
    await store.close();
  });

  test(`${name}: pro 60/minute, enterprise custom limits carried on the key, enterprise without limits unlimited`, async (t) => {
    const { core, store } = await limiter({ ip_per_minute: 0 });
    const pro = { apikey: key('pro') };
    for (let i = 0; i < 60; i++) t.is((await core.access(req('1.1.1.1', pro))).kind, 'continue');
    t.is((await core.access(req('1.1.1.1', pro))).kind, 'respond');
    const custom = { apikey: key('enterprise', 'user_e', { minute: 2, day: null }) };
    t.is((await core.access(req('1.1.1.1', custom))).kind, 'continue');
    t.is((await core.access(req('1.1.1.1', custom))).kind, 'continue');
    t.is((await core.access(req('1.1.1.1', custom))).kind, 'respond');
    const unlimited = { apikey: key('enterprise', 'user_u', { minute: null, day: null }) };
    for (let i = 0; i < 100; i++) t.is((await core.access(req('1.1.1.1', unlimited))).kind, 'continue');
    // A key nobody set limits on (the validator's custom_limits null) follows the edge's tier settings.
    const freeWithDefaults = { apikey: key('free', 'user_f') };
    const relaxed = await limiter({ ip_per_minute: 0, tiers: { free: { minute: 10, day: 100 } }, user_tier: 'free' });
    for (let i = 0; i < 10; i++) t.is((await relaxed.core.access(req('1.1.1.1', freeWithDefaults))).kind, 'continue');
    await store.close();
    await relaxed.store.close();
  });

  test(`${name}: ip_limit_phase access: address and tier in one atomic check; a refused request counts nowhere`, async (t) => {
    const { core, store } = await limiter({ ip_limit_phase: 'access', ip_per_minute: 4 });
    const ip = freshIp();
    const shared = { apikey: key('free') };
    for (let i = 0; i < 3; i++) t.is((await core.access(req(ip, shared))).kind, 'continue');
    const refusedByTier = await core.access(req(ip, shared));
    t.is(refusedByTier.kind, 'respond');
    t.is(headersOf(refusedByTier)[HEADERS.ipRemaining], '1', 'the refused request did not use the address quota');
    t.is((await core.access(req(ip))).kind, 'continue');
    t.is((await core.access(req(ip))).kind, 'respond');
    t.is(core.rewrite ? (await core.rewrite(req(freshIp()))).kind : 'continue', 'continue');
    await store.close();
  });

  test(`${name}: JWT callers are limited per user by the user tier; guests by the guest tier`, async (t) => {
    const { core, store } = await limiter({ ip_per_minute: 0, user_tier: 'pro', guest_tier: 'free' });
    const guest = { jwt: jwt(true) };
    for (let i = 0; i < 3; i++) t.is((await core.access(req(freshIp(), guest))).kind, 'continue');
    t.is((await core.access(req(freshIp(), guest))).kind, 'respond', 'per user, whatever the address');
    const user = { jwt: jwt(false) };
    const d = await core.access(req(freshIp(), user));
    t.is(headersOf(d)[HEADERS.limit], '60');
    await store.close();
  });

  test(`${name}: every request counts against its user's bucket, whichever key or token it used`, async (t) => {
    const { core, store } = await limiter({ ip_per_minute: 0 });
    const userId = `user_${randomBytes(4).toString('hex')}`;
    const keys = Array.from({ length: 10 }, () => ({ apikey: key('free', userId) }));
    let accepted = 0;
    for (let i = 0; i < 30; i++) if ((await core.access(req(freshIp(), keys[i % 10]!))).kind === 'continue') accepted++;
    t.is(accepted, 3, 'ten keys of one free user: 3 a minute in total');
    await store.close();
  });

  test(`${name}: a key's own limits (only an administrator sets them) replace its tier's: a lower one tightens, a higher one loosens`, async (t) => {
    const { core, store } = await limiter({ ip_per_minute: 0, tiers: { ...{ free: { minute: 3, day: 50 } }, enterprise: { minute: 5 } }, user_tier: 'free' });
    const looser = { apikey: key('enterprise', `user_${randomBytes(4).toString('hex')}`, { minute: 10, day: null }) };
    let accepted = 0;
    for (let i = 0; i < 12; i++) if ((await core.access(req('1.1.1.1', looser))).kind === 'continue') accepted++;
    t.is(accepted, 10, 'an administrator raised the key above its tier');
    const stricter = { apikey: key('enterprise', `user_${randomBytes(4).toString('hex')}`, { minute: 2, day: null }) };
    accepted = 0;
    for (let i = 0; i < 10; i++) if ((await core.access(req('1.1.1.1', stricter))).kind === 'continue') accepted++;
    t.is(accepted, 2, 'but may tighten it');
    await store.close();
  });

  test(`${name}: token callers with email_verified false get the unverified tier (default: the guest tier)`, async (t) => {
    const { core, store } = await limiter({ ip_per_minute: 0, user_tier: 'pro', guest_tier: 'free' });
    const unverified = { jwt: { ...jwt(false), emailVerified: false } };
    t.is(headersOf(await core.access(req(freshIp(), unverified)))[HEADERS.limit], '3');
    const verified = { jwt: { ...jwt(false), emailVerified: true } };
    t.is(headersOf(await core.access(req(freshIp(), verified)))[HEADERS.limit], '60');
    const raised = await limiter({ ip_per_minute: 0, unverified_user_tier: 'pro' });
    t.is(headersOf(await raised.core.access(req(freshIp(), { jwt: { ...jwt(false), emailVerified: false } })))[HEADERS.limit], '60');
    await store.close();
    await raised.store.close();
  });

  test(`${name}: a key seen valid has its per-address count moved to the access phase, one counter call for both, until a revocation names it`, async (t) => {
    const clock = new ManualClock(T0);
    const inner = await makeStore();
    let calls = 0;
    const store: CounterStore = { name: inner.name, hit: (windows, now) => (calls++, inner.hit(windows, now)), close: () => inner.close() };
    const config = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_${name}_${randomBytes(3).toString('hex')}`, ip_per_minute: 3 });
    const core = createTieredRateLimit(config, { store, clock });
    const revocations = createInProcessRevocations();
    await core.attach(revocations);
    const apiKey = `sk_${randomBytes(16).toString('hex')}`;
    const hash = sha256Hex(apiKey);
    const identity: VerifiedIdentity = { ...key('pro', `user_${randomBytes(4).toString('hex')}`), bucket: `key:${hash}` };
    const ip = freshIp();
    /** One request through both phases as a host runs them: the rewrite's shared facts, then the key's identity. */
    const send = async (headers: Record<string, string> = { 'x-api-key': apiKey }) => {
      calls = 0;
      const request: EdgeRequest = { ...req(ip), headers };
      const rewrite = await core.rewrite!(request);
      if (rewrite.kind === 'respond') return { rewrite, calls };
      Object.assign(request.shared, rewrite.share);
      request.shared.apikey = identity;
      return { rewrite, access: await core.access(request), calls };
    };

    const first = await send();
    t.is(first.calls, 2, 'a key not seen yet: the address counted before authentication, the tier after it');
    t.is(headersOf(first.rewrite)[HEADERS.ipRemaining], '2');
    const second = await send();
    t.is(second.calls, 1, 'a key seen valid: both counts in one call');
    t.deepEqual(second.rewrite, { kind: 'continue', share: { ipCountAtAccess: true } });
    t.is(headersOf(second.access!)[HEADERS.ipRemaining], '1', 'the address is still counted');
    t.is(headersOf(second.access!)[HEADERS.remaining], '58');
    t.is((await send()).calls, 1);
    const over = await send();
    t.is(over.access?.kind === 'respond' ? over.access.status : 0, 429, 'the per-address limit holds in the access phase');
    t.regex((over.access as { body: { error: { message: string } } }).body.error.message, /3 requests per minute from this address/);

    t.is((await send({ 'x-api-key': apiKey, authorization: 'Bearer eyJ.a.b' })).calls, 2, 'another credential beside the key: counted before authentication');
    await revocations.publish(hash);
    const revoked = await send();
    t.is(revoked.calls, 2, 'a revoked key is counted before authentication again');
    t.is((await send()).calls, 1, 'and moved again once it is seen valid');
    await revocations.publish(`user:${identity.userId}`);
    t.is((await send()).calls, 2, "a revocation of the key's user forgets it too");
    await core.close!();
  });

  test(`${name}: a staged hit counts as two hits one after the other: the first stage's increments stay when the second is refused`, async (t) => {
    const store = await makeStore();
    const at = `${PREFIX}_${name}_stages_${randomBytes(3).toString('hex')}`;
    const windows = [
      { key: `${at}:address`, limit: 3, ttlMs: 60_000 },
      { key: `${at}:tier`, limit: 1, ttlMs: 60_000 },
    ];
    t.like(await store.hit(windows, T0, 1), { allowed: true, counts: [1, 1] });
    t.like(await store.hit(windows, T0, 1), { allowed: false, blocked: 1, counts: [2, 1] }, 'the tier refused, the address counted');
    t.like(await store.hit(windows, T0), { allowed: false, blocked: 1, counts: [2, 1] }, 'one stage: a refusal increments nothing');
    t.like(await store.hit(windows, T0, 1), { allowed: false, blocked: 1, counts: [3, 1] });
    t.like(await store.hit(windows, T0, 1), { allowed: false, blocked: 0, counts: [3, 1] }, 'the address refused: nothing counted');
    await store.close();
  });

  test(`${name}: a known key refused by its tier still counts against its address, as the two phases would`, async (t) => {
    const clock = new ManualClock(T0);
    const store = await makeStore();
    const config = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_${name}_${randomBytes(3).toString('hex')}` });
    const core = createTieredRateLimit(config, { store, clock });
    await core.attach(createInProcessRevocations());
    const apiKey = `sk_${randomBytes(16).toString('hex')}`;
    const identity: VerifiedIdentity = { ...key('free', `user_${randomBytes(4).toString('hex')}`), bucket: `key:${sha256Hex(apiKey)}` };
    const ip = freshIp();
    const answers: Decision[] = [];
    for (let i = 0; i < 5; i++) {
      const request: EdgeRequest = { ...req(ip), headers: { 'x-api-key': apiKey } };
      const rewrite = await core.rewrite!(request);
      Object.assign(request.shared, rewrite.kind === 'continue' ? rewrite.share : {});
      request.shared.apikey = identity;
      answers.push(await core.access(request));
    }
    t.deepEqual(answers.map((d) => d.kind), ['continue', 'continue', 'continue', 'respond', 'respond'], 'free: 3 a minute');
    t.is(headersOf(answers[3]!)[HEADERS.ipRemaining], '96', 'the fourth request counted against its address though its tier refused it');
    t.is(headersOf(answers[4]!)[HEADERS.ipRemaining], '95');
    t.is(headersOf(answers[4]!)[HEADERS.remaining], '0');
    await core.close!();
  });

  test(`${name}: a known exempt key skips the per-address count only on a request it authenticates; a refusal or an early answer counts the address`, async (t) => {
    const clock = new ManualClock(T0);
    const store = await makeStore();
    const config = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_${name}_${randomBytes(3).toString('hex')}`, ip_per_minute: 3 });
    // No revocation channel (as on Kong): the exemption needs none.
    const core = createTieredRateLimit(config, { store, clock });
    const apiKey = `sk_${randomBytes(16).toString('hex')}`;
    const identity: VerifiedIdentity = { ...key('enterprise', `user_${randomBytes(4).toString('hex')}`), bucket: `key:${sha256Hex(apiKey)}` };
    const ip = freshIp();
    /** The rewrite, then (as the host runs it) the access phase with the key's identity, none (refused, or a public route), or the host's settle (an early answer). */
    const send = async (after: 'authenticated' | 'refused' | 'settled') => {
      const request: EdgeRequest = { ...req(ip), headers: { 'x-api-key': apiKey } };
      const rewrite = await core.rewrite!(request);
      if (rewrite.kind === 'respond') return rewrite;
      Object.assign(request.shared, rewrite.share);
      if (after === 'settled') return core.settleRewrite!(request);
      if (after === 'authenticated') request.shared.apikey = identity;
      return core.access(request);
    };
    const status = (d: Decision) => (d.kind === 'respond' ? d.status : 200);

    const first: EdgeRequest = { ...req(ip), headers: { 'x-api-key': apiKey } };
    t.is(headersOf(await core.rewrite!(first))[HEADERS.ipRemaining], '2', 'a key not known yet: counted before authentication');
    first.shared.apikey = identity;
    t.false(HEADERS.ipRemaining in headersOf(await core.access(first)), 'and not again once seen exempt');
    t.false(HEADERS.ipRemaining in headersOf(await send('authenticated')), 'known exempt, authenticating the request: not counted');
    const refused = await send('refused');
    t.is(status(refused), 200, 'the limiter itself leaves a refused key to the refusal of the auth plugins');
    t.is(headersOf(refused)[HEADERS.ipRemaining], '1', 'a known exempt key that did not authenticate the request: the address counted in the access phase');
    t.is(headersOf(await send('settled'))[HEADERS.ipRemaining], '0', 'an early answer: the host settles the count');
    const over = await send('refused');
    t.is(status(over), 429);
    t.regex((over as { body: { error: { message: string } } }).body.error.message, /3 requests per minute from this address/);
    t.is(status(await send('settled')), 429, 'settled over the limit: refused as the rewrite would have');
    for (let i = 0; i < 3; i++) t.is(status(await send('authenticated')), 200, 'the key itself, authenticating the request, is never held to the address limit');
    await core.close!();
  });

  test(`${name}: without the revocation channel, or when the subscription is lost, a known key is counted before authentication`, async (t) => {
    const clock = new ManualClock(T0);
    const inner = await makeStore();
    let calls = 0;
    const store: CounterStore = { name: inner.name, hit: (windows, now) => (calls++, inner.hit(windows, now)), close: () => inner.close() };
    const config = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_${name}_${randomBytes(3).toString('hex')}` });
    const apiKey = `sk_${randomBytes(16).toString('hex')}`;
    const identity: VerifiedIdentity = { ...key('pro'), bucket: `key:${sha256Hex(apiKey)}` };
    const send = async (core: ReturnType<typeof createTieredRateLimit>) => {
      calls = 0;
      const request: EdgeRequest = { ...req(freshIp()), headers: { authorization: `Bearer ${apiKey}` } };
      const rewrite = await core.rewrite!(request);
      Object.assign(request.shared, rewrite.kind === 'continue' ? rewrite.share : {});
      request.shared.apikey = identity;
      await core.access(request);
      return calls;
    };
    const alone = createTieredRateLimit(config, { store, clock });
    t.deepEqual([await send(alone), await send(alone)], [2, 2]);
    let handlers: Parameters<RevocationChannel['subscribe']>[0] | undefined;
    const channel: RevocationChannel = { publish: async () => {}, subscribe: async (h) => ((handlers = h), async () => {}), close: async () => {} };
    const following = createTieredRateLimit(config, { store, clock });
    await following.attach(channel);
    t.deepEqual([await send(following), await send(following)], [2, 1], 'a Bearer key counts as the only credential');
    handlers!.onResync();
    t.is(await send(following), 2, 'a lost subscription forgets every key');
    await following.close!();
    await alone.close!();
  });

  test(`${name}: exempt paths count nowhere; ip_per_hour; IPv6 clients bucketed by /64 (configurable)`, async (t) => {
    const { core, store, clock } = await limiter({ ip_per_minute: 2, exempt_paths: ['/healthz'] });
    const probe = { ...req('10.9.9.9'), path: '/healthz' };
    for (let i = 0; i < 10; i++) t.deepEqual(await core.rewrite!(probe), { kind: 'continue' });
    t.is((await core.rewrite!(req('10.9.9.9'))).kind, 'continue', 'the probes used none of the address budget');
    t.is((await core.rewrite!(req('2001:db8:1:2::1'))).kind, 'continue');
    t.is((await core.rewrite!(req('2001:db8:1:2:ffff::9'))).kind, 'continue');
    t.is((await core.rewrite!(req('2001:db8:1:2::abcd'))).kind, 'respond', 'one /64, one bucket');
    t.is((await core.rewrite!(req('2001:db8:1:3::1'))).kind, 'continue', 'the next /64 is another client');
    const fine = await limiter({ ip_per_minute: 1, ipv6_prefix_length: 128 });
    t.is((await fine.core.rewrite!(req('2001:db8::1'))).kind, 'continue');
    t.is((await fine.core.rewrite!(req('2001:db8::2'))).kind, 'continue', '/128: every address its own bucket');
    const hourly = await limiter({ ip_per_minute: 0, ip_per_hour: 2, ip_limit_phase: 'access' });
    t.is((await hourly.core.access(req('10.8.8.8'))).kind, 'continue');
    hourly.clock.advance(30 * 60_000);
    t.is((await hourly.core.access(req('10.8.8.8'))).kind, 'continue');
    const over = await hourly.core.access(req('10.8.8.8'));
    t.is(over.kind, 'respond');
    t.regex(((over as { body: { error: { message: string } } }).body).error.message, /2 requests per hour from this address/);
    hourly.clock.advance(60 * 60_000);
    t.is((await hourly.core.access(req('10.8.8.8'))).kind, 'continue', 'the next hour');
    void clock;
    await store.close();
    await fine.store.close();
    await hourly.store.close();
  });
}

test('redis: two limiters (two nodes) share one counter', async (t) => {
  const prefix = `${PREFIX}_shared`;
  const clock = new ManualClock(T0);
  const a = createRedisStore({ url: TEST_REDIS_URL, timeoutMs: 500 });
  const b = createRedisStore({ url: TEST_REDIS_URL, timeoutMs: 500 });
  await Promise.all([a.ready(), b.ready()]);
  const config = parseTieredRateLimitConfig({ redis_prefix: prefix, ip_per_minute: 0 });
  const nodeA = createTieredRateLimit(config, { store: a, clock });
  const nodeB = createTieredRateLimit(config, { store: b, clock });
  const shared = { apikey: key('free') };
  const results = [];
  for (let i = 0; i < 6; i++) results.push((await (i % 2 ? nodeB : nodeA).access(req('2.2.2.2', shared))).kind);
  t.deepEqual(results, ['continue', 'continue', 'continue', 'respond', 'respond', 'respond']);
  await a.close();
  await b.close();
});

test('redis failing mid-flight: 503 by default (fault_policy deny), served and logged with fault_policy allow', async (t) => {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(TEST_REDIS_URL).port || 6379) });
  const warnings: string[] = [];
  const logger = { warn: (_f: Record<string, unknown>, m: string) => void warnings.push(m), error: () => {} };
  const clock = new ManualClock(T0);
  const store = createRedisStore({ url: proxy.url('redis'), timeoutMs: 200 });
  await store.ready();
  const allow = createTieredRateLimit(parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_fault`, fault_policy: 'allow' }), { store, clock, logger });
  const byDefault = parseTieredRateLimitConfig({ redis_prefix: `${PREFIX}_fault` });
  t.is(byDefault.fault_policy, 'deny');
  const denyCore = createTieredRateLimit(byDefault, { store, clock, logger });
  t.is((await allow.rewrite!(req('3.3.3.3'))).kind, 'continue');
  proxy.cut();
  const allowed = await allow.rewrite!(req('3.3.3.3'));
  t.deepEqual(allowed, { kind: 'continue' });
  t.true(warnings.length >= 1);
  const denied = await denyCore.rewrite!(req('3.3.3.3'));
  t.is(denied.kind === 'respond' ? denied.status : 0, 503);
  await store.close();
  await proxy.close();
});

test('the schema rejects an unknown policy and bad tier values', (t) => {
  t.throws(() => parseTieredRateLimitConfig({ policy: 'cluster' }), { message: /one of/ });
  t.throws(() => parseTieredRateLimitConfig({ tiers: { free: { minute: 'many' } } }), { message: /integer/ });
});
