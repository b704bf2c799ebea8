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
  const callsBefore = edge.validator.calls;
  const good = edge.validator.add('user_after_flood', 'pro');
  const res = await get('/v1/models', { ...from, 'x-api-key': good.key });
  t.is(res.status, 429);
  t.is(edge.validator.calls, callsBefore, 'refused before reaching the validator');
});
