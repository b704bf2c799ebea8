import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import type { TestPlatform } from '../helpers/platform.js';
import { platformForFile } from '../helpers/platform-per-file.js';

// Rate limits an administrator sets on a key of any tier (POST and PATCH /v1/admin/api-keys accept
// and echo them) are the limits the edge holds that key to; a user cannot set limits on a key of
// their own; keys nobody set limits on follow the edge's tier settings (here free is raised far
// above the 3 a minute the key validator reports as the free tier's default). Through the embedded
// edge with the real identity service; each test speaks from its own client address.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const MINUTE = 60_000;
const start = Math.floor(Date.now() / 86_400_000) * 86_400_000 + 86_400_000 + 1_000; // 1 s into tomorrow (UTC)
const clock = new ManualClock(start);
let p: TestPlatform;

platformForFile(
  {
    clock,
    env: {
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      TRUSTED_PROXIES: '127.0.0.1',
      EDGE_RATE_LIMIT_IP_PER_MINUTE: '1000',
      EDGE_RATE_LIMIT_FREE_PER_MINUTE: '100',
      EDGE_RATE_LIMIT_FREE_PER_DAY: '1000',
      EDGE_RATE_LIMIT_PRO_PER_MINUTE: '60',
      EDGE_RATE_LIMIT_PRO_PER_DAY: '100000',
    },
  },
  (started) => (p = started),
);

async function call(path: string, init: { method?: string; from: string; headers?: Record<string, string>; body?: unknown }) {
  const headers: Record<string, string> = { 'x-forwarded-for': init.from, ...init.headers };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${p.url}${path}`, { method: init.method ?? 'GET', headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: (text ? JSON.parse(text) : null) as any };
}

const admin = { 'x-api-key': ADMIN_KEY };

async function guest(from: string): Promise<{ access_token: string; refresh_token: string; user_id: string }> {
  const login = await call('/llm/auth/guest-login', { method: 'POST', from });
  if (login.status !== 201) throw new Error(`guest login: ${login.status} ${JSON.stringify(login.json)}`);
  return login.json;
}

async function statusesOf(key: string, from: string, count: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) statuses.push((await call('/v1/models', { from, headers: { 'x-api-key': key } })).status);
  return statuses;
}

test.serial('a pro key an admin limited to 2 a minute and 5 a day is held to them', async (t) => {
  const from = '198.51.100.60';
  const owner = await guest(from);
  const created = await call('/v1/admin/api-keys', { method: 'POST', from, headers: admin, body: { user_id: owner.user_id, name: 'throttled', tier: 'pro', limits: { requests_per_minute: 2, requests_per_day: 5 } } });
  t.is(created.status, 201);
  t.deepEqual(created.json.limits, { requests_per_minute: 2, requests_per_day: 5 });
  const first = await call('/v1/models', { from, headers: { 'x-api-key': created.json.key } });
  t.is(first.status, 200);
  t.is(first.headers.get('x-ratelimit-limit'), '2');
  t.deepEqual(await statusesOf(created.json.key, from, 2), [200, 429]);
  clock.advance(MINUTE);
  t.deepEqual(await statusesOf(created.json.key, from, 3), [200, 200, 429]);
  clock.advance(MINUTE);
  const day = await statusesOf(created.json.key, from, 2);
  t.deepEqual(day, [200, 429]);
  const spent = await call('/v1/models', { from, headers: { 'x-api-key': created.json.key } });
  t.is(spent.json.error.code, 'insufficient_quota', 'the day is spent');
  clock.advance(MINUTE);
});

test.serial('a limit an admin sets later (PATCH) holds from the next request; a raised one is honoured', async (t) => {
  const from = '198.51.100.61';
  const owner = await guest(from);
  const created = await call('/v1/admin/api-keys', { method: 'POST', from, headers: admin, body: { user_id: owner.user_id, name: 'later', tier: 'free' } });
  t.is(created.status, 201);
  const key = created.json.key as string;
  t.deepEqual(await statusesOf(key, from, 5), [200, 200, 200, 200, 200], "nobody set limits: the edge's free tier (100 a minute), not the validator's default of 3");
  const patched = await call(`/v1/admin/api-keys/${created.json.id}`, { method: 'PATCH', from, headers: admin, body: { limits: { requests_per_minute: 6 } } });
  t.is(patched.status, 200);
  // The key's own counter starts with the limit: six more this minute, whatever it used before.
  t.deepEqual(await statusesOf(key, from, 7), [200, 200, 200, 200, 200, 200, 429], 'six a minute');
  clock.advance(MINUTE);

  const raised = await call('/v1/admin/api-keys', { method: 'POST', from, headers: admin, body: { user_id: owner.user_id, name: 'raised', tier: 'pro', limits: { requests_per_minute: 70 } } });
  t.is(raised.status, 201);
  const statuses = await statusesOf(raised.json.key, from, 71);
  t.is(statuses.filter((s) => s === 200).length, 70, 'a pro key raised above the tier’s 60 a minute');
  t.is(statuses.at(-1), 429);
  clock.advance(MINUTE);
});

test.serial('a user cannot set limits on a key of their own, nor change a key through the admin API', async (t) => {
  const from = '198.51.100.62';
  const account = await guest(from);
  const email = `limits-${randomBase62(6).toLowerCase()}@example.com`;
  const up = await call('/auth/upgrade', { method: 'POST', from, headers: { authorization: `Bearer ${account.access_token}` }, body: { email } });
  t.is(up.status, 200);
  const refreshed = await call('/llm/auth/refresh', { method: 'POST', from, body: { refresh_token: account.refresh_token } });
  t.is(refreshed.status, 200);
  const bearer = { authorization: `Bearer ${refreshed.json.access_token}` };
  const own = await call('/auth/api-keys', { method: 'POST', from, headers: bearer, body: { name: 'mine', limits: { requests_per_minute: 1000000 } } });
  t.is(own.status, 403);
  t.is(own.json.error.param, 'limits');
  const plain = await call('/auth/api-keys', { method: 'POST', from, headers: bearer, body: { name: 'mine' } });
  t.is(plain.status, 201);
  t.is(plain.json.limits, null);
  const patch = await call(`/v1/admin/api-keys/${plain.json.id}`, { method: 'PATCH', from, headers: bearer, body: { limits: { requests_per_minute: 1000000 } } });
  t.is(patch.status, 403);
  clock.advance(MINUTE);
});
