import type { ExecutionContext } from 'ava';
import { ManualClock, offsetToNextMinute, randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from './platform.js';
import type { FigureRow } from './reliability-figures.js';
import { waitFor } from './wait.js';

/**
 * The Redis outage scenarios (edge rate-limit counters, revocation pub/sub), shared by the suite
 * that cuts Redis behind a fault proxy and the one that stops a real Redis and starts it again:
 * only how Redis goes away and comes back differs. The clock is frozen, so no cache entry or
 * limiter window expires by itself while a scenario runs.
 */
export interface RedisOutage {
  /** The REDIS_URL the platform uses. */
  url: string;
  /** Takes Redis away (every connection dropped, new ones refused). */
  fail(): Promise<void> | void;
  /** Brings it back at the same address. */
  restore(): Promise<void> | void;
  close(): Promise<void>;
}

export const GUEST_PER_MINUTE = 5;
const ADMIN_KEY = `sk_${randomBase62(32)}`;

interface Setup {
  p: TestPlatform;
  outage: RedisOutage;
  clock: ManualClock;
  token: string;
  statuses: number[];
  call(path: string, credential: { token?: string; key?: string }): Promise<{ status: number; body: any }>;
}

async function setup(t: ExecutionContext, outage: RedisOutage, policy: 'allow' | 'deny'): Promise<Setup> {
  let started: TestPlatform | undefined;
  t.teardown(async () => {
    await started?.stop();
    await outage.close();
  });
  const clock = new ManualClock();
  clock.advance(offsetToNextMinute(clock));
  const p = (started = await startTestPlatform({
    clock,
    env: {
      REDIS_URL: outage.url,
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      EDGE_RATE_LIMIT_FREE_PER_MINUTE: String(GUEST_PER_MINUTE),
      EDGE_RATE_LIMIT_FAULT_POLICY: policy,
    },
  }));
  const token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;
  const statuses: number[] = [];
  const call = async (path: string, credential: { token?: string; key?: string }) => {
    const res = await fetch(`${p.url}${path}`, { headers: credential.key ? { 'x-api-key': credential.key } : { authorization: `Bearer ${credential.token}` } });
    const reply = { status: res.status, body: (await res.json().catch(() => null)) as any };
    statuses.push(reply.status);
    return reply;
  };
  return { p, outage, clock, token, statuses, call };
}

/**
 * Policy `allow` (set explicitly; the default is `deny`): requests pass while Redis is away; once it is back the limiter
 * counts again (from the window's count Redis kept, or from zero after a restart without
 * persistence), and an API key revoked during the outage is refused: the edge's revocation
 * subscriber resynchronises on reconnect and flushes its validation cache.
 */
export async function allowPolicyScenario(t: ExecutionContext, row: FigureRow, outage: RedisOutage): Promise<void> {
  const s = await setup(t, outage, 'allow');
  // A key for the guest's user, created by the admin and used once (now in the edge's cache).
  const me = await s.call('/auth/me', { token: s.token });
  const created = await fetch(`${s.p.url}/v1/admin/api-keys`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: me.body.id, name: 'revoked in the outage', tier: 'pro' }),
  }).then((r) => r.json() as Promise<{ id: string; key: string }>);
  t.is((await s.call('/v1/models', { key: created.key })).status, 200);

  // Redis up: the guest tier allows GUEST_PER_MINUTE per minute (the login and /auth/me counted too).
  const upto = [];
  for (let i = 0; i <= GUEST_PER_MINUTE; i++) upto.push((await s.call('/v1/models', { token: s.token })).status);
  t.is(upto.at(-1), 429);

  await outage.fail();
  row.faultsInjected++;
  // Policy allow: over the limit, yet served while the counters cannot be read.
  for (let i = 0; i < 3; i++) t.is((await s.call('/v1/models', { token: s.token })).status, 200);
  const revoked = await fetch(`${s.p.url}/v1/admin/api-keys/${created.id}`, { method: 'DELETE', headers: { 'x-api-key': ADMIN_KEY } });
  t.is(revoked.status, 200);

  await outage.restore();
  await waitFor(async () => (await s.call('/v1/models', { token: s.token })).status === 429, 30_000, 'the limiter counts again');
  const refused = await waitFor(async () => {
    const reply = await s.call('/v1/models', { key: created.key });
    return reply.status === 401 ? reply : undefined;
  }, 30_000, 'the key revoked during the outage is refused');
  t.like(refused.body, { error: { type: 'auth_error' } });
  s.clock.advance(60_000);
  t.is((await s.call('/v1/models', { token: s.token })).status, 200);

  row.requestsChecked += s.statuses.length;
  row.fiveXx += s.statuses.filter((x) => x >= 500).length;
  t.deepEqual(s.statuses.filter((x) => ![200, 401, 429].includes(x)), []);
  row.faultsSurvived++;
}

/** Policy `deny` (the default): 503 `service_unavailable` in the error body while Redis is away, served again when it is back. */
export async function denyPolicyScenario(t: ExecutionContext, row: FigureRow, outage: RedisOutage): Promise<void> {
  const s = await setup(t, outage, 'deny');
  const call = () => s.call('/v1/models', { token: s.token });
  const before = await call();
  t.is(before.status, 200, JSON.stringify(before.body));
  await outage.fail();
  row.faultsInjected++;
  for (let i = 0; i < 3; i++) {
    const reply = await call();
    t.is(reply.status, 503);
    t.like(reply.body, { error: { type: 'internal_error', code: 'service_unavailable' } });
  }
  await outage.restore();
  await waitFor(async () => (await call()).status === 200, 30_000, 'served again after Redis is back');

  row.requestsChecked += s.statuses.length;
  row.refused503 += s.statuses.filter((x) => x === 503).length;
  row.fiveXx += s.statuses.filter((x) => x >= 500 && x !== 503).length;
  t.deepEqual(s.statuses.filter((x) => x !== 200 && x !== 503), []);
  row.faultsSurvived++;
}
