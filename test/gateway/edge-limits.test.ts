import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from './edge-harness.js';

// The embedded gateway on deck/kong.yaml with small limits: per IP 5/minute, free keys 3/minute
// and 5/day. The client IP comes from X-Forwarded-For because 127.0.0.1 is a trusted proxy, so
// each test uses its own address. Windows are moved with the clock, never waited for.
const T0 = Date.UTC(2026, 10, 22, 13, 0, 10);
const clock = new ManualClock(T0);
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({
    clock,
    trustedProxies: ['127.0.0.1'],
    vars: { DECK_RATE_LIMIT_IP_PER_MINUTE: '5', DECK_RATE_LIMIT_FREE_PER_MINUTE: '3', DECK_RATE_LIMIT_FREE_PER_DAY: '5', DECK_RATE_LIMIT_PRO_PER_MINUTE: '60' },
  });
});
test.after.always(async () => {
  await edge?.close();
});

const get = async (path: string, headers: Record<string, string>) => {
  const res = await fetch(`${edge.url}${path}`, { headers });
  return { status: res.status, headers: res.headers, body: (await res.json()) as { error?: { type: string; code: string; message: string } } };
};

test.serial('free key: 3 per minute with X-RateLimit-Limit/Remaining/Reset, then 429 with Retry-After', async (t) => {
  clock.set(T0);
  const key = edge.validator.add('user_free', 'free');
  const headers = { 'x-api-key': key.key, 'x-forwarded-for': '198.51.100.1' };
  const reset = String((T0 - 10_000) / 1000 + 60);
  for (let i = 1; i <= 3; i++) {
    const res = await get('/v1/models', headers);
    t.is(res.status, 200);
    t.is(res.headers.get('x-ratelimit-limit'), '3');
    t.is(res.headers.get('x-ratelimit-remaining'), String(3 - i));
    t.is(res.headers.get('x-ratelimit-reset'), reset);
    t.is(res.headers.get('x-ratelimit-limit-minute'), '5');
    t.is(res.headers.get('x-ratelimit-remaining-minute'), String(5 - i));
  }
  const over = await get('/v1/models', headers);
  t.is(over.status, 429);
  t.like(over.body.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  t.is(over.headers.get('retry-after'), '50');
  t.is(over.headers.get('x-ratelimit-remaining'), '0');
  t.is(over.headers.get('x-should-retry'), null);
  clock.advance(50_000); // next minute
  t.is((await get('/v1/models', headers)).status, 200);
});

test.serial('free key daily quota: 5 per day → 429 insufficient_quota, x-should-retry: false', async (t) => {
  clock.set(T0 + 3_600_000);
  const key = edge.validator.add('user_daily', 'free');
  const ip = (n: number) => ({ 'x-api-key': key.key, 'x-forwarded-for': `198.51.100.${10 + n}` });
  for (let i = 0; i < 3; i++) t.is((await get('/v1/models', ip(i))).status, 200);
  clock.advance(60_000);
  for (let i = 3; i < 5; i++) t.is((await get('/v1/models', ip(i))).status, 200);
  const over = await get('/v1/models', ip(6));
  t.is(over.status, 429);
  t.is(over.body.error!.code, 'insufficient_quota');
  t.is(over.headers.get('x-should-retry'), 'false');
  t.true(Number(over.headers.get('retry-after')) > 60);
});

test.serial('per-IP limit: 5 per minute for anyone from one address (public routes too), per address', async (t) => {
  clock.set(T0 + 7_200_000);
  const from = { 'x-forwarded-for': '203.0.113.77' };
  for (let i = 1; i <= 5; i++) {
    const res = await get('/.well-known/jwks.json', from);
    t.is(res.status, 200);
    t.is(res.headers.get('x-ratelimit-remaining-minute'), String(5 - i));
  }
  const over = await get('/.well-known/jwks.json', from);
  t.is(over.status, 429);
  t.is(over.headers.get('x-ratelimit-limit-minute'), '5');
  t.is(over.headers.get('x-ratelimit-remaining-minute'), '0');
  t.is(over.body.error!.code, 'rate_limit_exceeded');
  // A pro key from the same address is still refused: the address is over its limit.
  const pro = edge.validator.add('user_pro', 'pro');
  t.is((await get('/v1/models', { ...from, 'x-api-key': pro.key })).status, 429);
  t.is((await get('/.well-known/jwks.json', { 'x-forwarded-for': '203.0.113.78' })).status, 200);
});

test.serial('JWT users get the user tier (pro: 60/minute) per user', async (t) => {
  clock.set(T0 + 10_800_000);
  const jwt = await edge.issuer.sign({}, { iat: clock.now() / 1000 - 5, sub: 'user_tok' });
  const res = await get('/v1/models', { authorization: `Bearer ${jwt}`, 'x-forwarded-for': '198.51.100.200' });
  t.is(res.status, 200);
  t.is(res.headers.get('x-ratelimit-limit'), '60');
  t.is(res.headers.get('x-ratelimit-remaining'), '59');
});

test.serial('refused credentials count against the address: the per-IP limit runs before authentication', async (t) => {
  clock.set(T0 + 14_400_000);
  const from = { 'x-forwarded-for': '203.0.113.99' };
  for (let i = 0; i < 5; i++) t.is((await get('/v1/models', { ...from, 'x-api-key': `sk_${'B'.repeat(31)}${i}` })).status, 401);
  // Over the limit, a key not seen before is checked once before the refusal (it might be an
  // exempt enterprise key), and still refused: 429.
  const callsBefore = edge.validator.calls;
  const good = edge.validator.add('user_after_flood', 'pro');
  const res = await get('/v1/models', { ...from, 'x-api-key': good.key });
  t.is(res.status, 429);
  t.is(res.body.error!.code, 'rate_limit_exceeded');
  t.is(edge.validator.calls, callsBefore + 1);
  // Those checks are capped at the limit (5) per address and window; then keys are refused before
  // reaching the validator, so a flood of made-up keys costs at most 5 extra checks a minute.
  for (let i = 0; i < 4; i++) t.is((await get('/v1/models', { ...from, 'x-api-key': `sk_${'C'.repeat(31)}${i}` })).status, 401);
  const capped = edge.validator.calls;
  const flood = await get('/v1/models', { ...from, 'x-api-key': `sk_${'D'.repeat(32)}` });
  t.is(flood.status, 429);
  t.is(edge.validator.calls, capped, 'refused before reaching the validator');
});

test.serial('enterprise keys are never held to the per-IP limit; a free key from the same address is', async (t) => {
  clock.set(T0 + 18_000_000);
  const from = { 'x-forwarded-for': '203.0.113.120' };
  const enterprise = edge.validator.add('user_ent_ip', 'enterprise');
  const free = edge.validator.add('user_free_ip', 'free', { minute: 100, day: 1000 });
  // The enterprise key sends far more than the address's 5 per minute.
  for (let i = 0; i < 12; i++) t.is((await get('/v1/models', { ...from, 'x-api-key': enterprise.key })).status, 200, `enterprise request ${i + 1}`);
  // It did not use up the address either: only its first request (before it was known) counted.
  for (let i = 0; i < 4; i++) t.is((await get('/.well-known/jwks.json', from)).status, 200);
  const over = await get('/v1/models', { ...from, 'x-api-key': free.key });
  t.is(over.status, 429, 'a free key is held to the per-IP limit');
  t.is(over.headers.get('x-ratelimit-limit-minute'), '5');
  // An address already over its limit: the enterprise key still passes, as Bearer too.
  t.is((await get('/v1/models', { ...from, authorization: `Bearer ${enterprise.key}` })).status, 200);
  // A fresh process would not know the key yet: over the limit, it is checked and let through.
  const other = edge.validator.add('user_ent_ip2', 'enterprise');
  t.is((await get('/v1/models', { ...from, 'x-api-key': other.key })).status, 200);
});

test.serial('an enterprise key exempts only the requests it authenticates: beside a public route it buys no requests past the per-IP limit', async (t) => {
  clock.set(T0 + 21_600_000);
  const from = { 'x-forwarded-for': '203.0.113.140' };
  const enterprise = edge.validator.add('user_ent_public', 'enterprise');
  // Known (and exempt) from an authenticated request…
  t.is((await get('/v1/models', { ...from, 'x-api-key': enterprise.key })).status, 200);
  // …but a public route never checks the key it carries: there the address's 5 per minute hold.
  const statuses: number[] = [];
  for (let i = 0; i < 7; i++) statuses.push((await get('/.well-known/jwks.json', { ...from, 'x-api-key': enterprise.key })).status);
  t.deepEqual(statuses, [200, 200, 200, 200, 429, 429, 429]);
  // The key itself is still exempt where it authenticates the request.
  t.is((await get('/v1/models', { ...from, 'x-api-key': enterprise.key })).status, 200);
  t.is((await get('/v1/models', { ...from, authorization: `Bearer ${enterprise.key}` })).status, 200);
});
