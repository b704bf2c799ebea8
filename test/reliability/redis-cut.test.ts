import test from 'ava';
import { ManualClock, offsetToNextMinute, randomBase62 } from '../../services/kit/index.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_REDIS_URL } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';

// Redis (edge rate-limit counters, revocation pub/sub) behind a fault proxy that cuts every
// connection and refuses new ones. The rate limiter follows EDGE_RATE_LIMIT_FAULT_POLICY: `allow`
// (the default) lets requests through while Redis is away, `deny` answers 503 in the error body.
// When Redis is back, the counters count again (the same window's count, since Redis kept it),
// and an API key revoked during the outage stops working: the edge's revocation subscriber
// resynchronises on reconnect and flushes its validation cache. The clock is frozen, so no cache
// entry or window expires by itself while the test runs.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const GUEST_PER_MINUTE = 5;
const figures = reliabilityFigures('redis-cut');
test.after.always(() => figures.write());

interface Setup {
  p: TestPlatform;
  proxy: FaultProxy;
  clock: ManualClock;
  token: string;
}

async function setup(policy: 'allow' | 'deny'): Promise<Setup> {
  const target = new URL(TEST_REDIS_URL);
  const proxy = await startFaultProxy({ host: target.hostname, port: Number(target.port || 6379) });
  const clock = new ManualClock();
  clock.advance(offsetToNextMinute(clock));
  const p = await startTestPlatform({
    clock,
    env: {
      REDIS_URL: proxy.url('redis'),
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      EDGE_RATE_LIMIT_FREE_PER_MINUTE: String(GUEST_PER_MINUTE),
      EDGE_RATE_LIMIT_FAULT_POLICY: policy,
    },
  });
  const token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;
  return { p, proxy, clock, token };
}

async function teardown(s: Setup | undefined): Promise<void> {
  await s?.p.stop();
  await s?.proxy.close();
}

const get = (s: Setup, path: string, credential: { token?: string; key?: string }) =>
  fetch(`${s.p.url}${path}`, { headers: credential.key ? { 'x-api-key': credential.key } : { authorization: `Bearer ${credential.token}` } }).then(async (res) => ({
    status: res.status,
    body: (await res.json().catch(() => null)) as any,
  }));

test('Redis cut, policy allow: requests pass during the outage, limits count again after, a key revoked during the outage is refused after reconnect', async (t) => {
  const row = figures.row('Redis cut (rate-limit policy allow, revocation during the outage)');
  const s = await setup('allow');
  t.teardown(() => teardown(s));
  const statuses: number[] = [];
  const call = async (path: string, credential: { token?: string; key?: string }) => {
    const reply = await get(s, path, credential);
    statuses.push(reply.status);
    return reply;
  };

  // A key for the guest's user, created by the admin and used once (now in the edge's cache).
  const me = await call('/auth/me', { token: s.token });
  const created = await fetch(`${s.p.url}/v1/admin/api-keys`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: me.body.id, name: 'revoked in the outage', tier: 'pro' }),
  }).then((r) => r.json() as Promise<{ id: string; key: string }>);
  t.is((await call('/v1/models', { key: created.key })).status, 200);

  // Redis up: the guest tier allows GUEST_PER_MINUTE per minute (the login and /auth/me counted too).
  const upto = [];
  for (let i = 0; i <= GUEST_PER_MINUTE; i++) upto.push((await call('/v1/models', { token: s.token })).status);
  t.is(upto.at(-1), 429);

  s.proxy.cut();
  row.faultsInjected++;
  // Policy allow: over the limit, yet served while the counters cannot be read.
  for (let i = 0; i < 3; i++) t.is((await call('/v1/models', { token: s.token })).status, 200);
  const revoked = await fetch(`${s.p.url}/v1/admin/api-keys/${created.id}`, { method: 'DELETE', headers: { 'x-api-key': ADMIN_KEY } });
  t.is(revoked.status, 200);

  s.proxy.resume();
  // Back: the same window's count (kept by Redis) applies again, and the revoked key is refused.
  await waitFor(async () => (await call('/v1/models', { token: s.token })).status === 429, 30_000, 'the limiter counts again');
  const refused = await waitFor(async () => {
    const reply = await call('/v1/models', { key: created.key });
    return reply.status === 401 ? reply : undefined;
  }, 30_000, 'the key revoked during the outage is refused');
  t.like(refused.body, { error: { type: 'auth_error' } });
  s.clock.advance(60_000);
  t.is((await call('/v1/models', { token: s.token })).status, 200);

  row.requestsChecked += statuses.length;
  row.fiveXx += statuses.filter((x) => x >= 500).length;
  t.deepEqual(statuses.filter((x) => ![200, 401, 429].includes(x)), []);
  row.faultsSurvived++;
});

test('Redis cut, policy deny: 503 in the error body during the outage, served again when Redis is back', async (t) => {
  const row = figures.row('Redis cut (rate-limit policy deny)');
  const s = await setup('deny');
  t.teardown(() => teardown(s));
  const statuses: number[] = [];
  const call = async () => {
    const reply = await get(s, '/v1/models', { token: s.token });
    statuses.push(reply.status);
    return reply;
  };
  t.is((await call()).status, 200);
  s.proxy.cut();
  row.faultsInjected++;
  for (let i = 0; i < 3; i++) {
    const reply = await call();
    t.is(reply.status, 503);
    t.like(reply.body, { error: { type: 'internal_error', code: 'service_unavailable' } });
  }
  s.proxy.resume();
  await waitFor(async () => (await call()).status === 200, 30_000, 'served again after Redis is back');

  row.requestsChecked += statuses.length;
  row.refused503 += statuses.filter((x) => x === 503).length;
  row.fiveXx += statuses.filter((x) => x >= 500 && x !== 503).length;
  t.deepEqual(statuses.filter((x) => x !== 200 && x !== 503), []);
  row.faultsSurvived++;
});
