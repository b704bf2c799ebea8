import test from 'ava';
import OpenAI from 'openai';
import { ManualClock } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import type { TestPlatform } from '../helpers/platform.js';
import { platformForFile } from '../helpers/platform-per-file.js';

// The attack class: escape a tier limit by rotating what the limit is keyed on — many keys of one
// user, deleting and recreating a key, minting guests, upgrading a guest with any e-mail, rotating
// IPv6 addresses inside one /64. All through the embedded edge (deck/kong.yaml) with the real
// identity service. The edge trusts 127.0.0.1 as a proxy, so each test speaks from its own client
// address (X-Forwarded-For) and the per-address limits of one test never touch another's.
// Free tier: 3 a minute, 5 a day; pro: 60 a minute. The clock is manual: windows move on command.
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
      EDGE_RATE_LIMIT_FREE_PER_MINUTE: '3',
      EDGE_RATE_LIMIT_FREE_PER_DAY: '5',
      EDGE_RATE_LIMIT_PRO_PER_MINUTE: '60',
      EDGE_RATE_LIMIT_PRO_PER_DAY: '100000',
      EDGE_GUEST_LOGIN_PER_HOUR: '4',
      // The setting's default (the guest tier), spelled out: upgraded accounts stay free until verified.
      EDGE_RATE_LIMIT_UNVERIFIED_TIER: 'free',
    },
  },
  (started) => (p = started),
);

async function call(path: string, init: RequestInit & { from: string }) {
  const headers = new Headers(init.headers);
  headers.set('x-forwarded-for', init.from);
  const res = await fetch(`${p.url}${path}`, { ...init, headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: (text ? JSON.parse(text) : null) as any };
}

async function guest(from: string) {
  const login = await call('/llm/auth/guest-login', { method: 'POST', from });
  if (login.status !== 201 && login.status !== 200) throw new Error(`guest login: ${login.status} ${JSON.stringify(login.json)}`);
  return login.json as { access_token: string; refresh_token: string; user_id: string };
}

async function adminKey(userId: string, from: string) {
  const created = await call('/v1/admin/api-keys', {
    method: 'POST',
    from,
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: userId, name: `k-${randomBase62(4)}`, tier: 'free' }),
  });
  if (created.status !== 201) throw new Error(`key create: ${created.status} ${JSON.stringify(created.json)}`);
  return created.json as { id: string; key: string };
}

const sdk = (apiKey: string, from: string) => new OpenAI({ baseURL: `${p.url}/v1`, apiKey, maxRetries: 0, defaultHeaders: { 'x-forwarded-for': from } });

test.serial('ten keys of one free user share one budget: 3 requests a minute in total, whichever key (openai SDK)', async (t) => {
  const from = '198.51.100.10';
  const user = await guest(from);
  const keys = [];
  for (let i = 0; i < 10; i++) keys.push((await adminKey(user.user_id, from)).key);
  let accepted = 0;
  let refused: unknown = null;
  for (let i = 0; i < 30; i++) {
    try {
      await sdk(keys[i % keys.length]!, from).models.list();
      accepted++;
    } catch (error) {
      refused = error;
    }
  }
  t.is(accepted, 3, 'rotating over ten keys buys nothing');
  t.true(refused instanceof OpenAI.RateLimitError);
  t.is((refused as InstanceType<typeof OpenAI.RateLimitError>).headers?.get('x-ratelimit-limit'), '3');
  t.truthy((refused as InstanceType<typeof OpenAI.RateLimitError>).headers?.get('retry-after'));
  clock.advance(MINUTE);
});

test.serial('deleting and recreating a key does not reset the daily quota: a deleted key still counts until the window ends', async (t) => {
  const from = '198.51.100.20';
  const user = await guest(from);
  const first = await adminKey(user.user_id, from);
  let accepted = 0;
  for (let i = 0; i < 3; i++) if ((await call('/v1/models', { from, headers: { 'x-api-key': first.key } })).status === 200) accepted++;
  clock.advance(MINUTE);
  if ((await call('/v1/models', { from, headers: { 'x-api-key': first.key } })).status === 200) accepted++;
  t.is(accepted, 4);
  // The owner deletes the key: the fifth and last request of the day.
  const del = await call(`/auth/api-keys/${first.id}`, { method: 'DELETE', from, headers: { authorization: `Bearer ${user.access_token}` } });
  t.is(del.status, 200);
  t.is((await call('/v1/models', { from, headers: { 'x-api-key': first.key } })).status, 401, 'the deleted key is gone');
  const second = await adminKey(user.user_id, from);
  const again = await call('/v1/models', { from, headers: { 'x-api-key': second.key } });
  t.is(again.status, 429);
  t.is(again.json.error.code, 'insufficient_quota');
  t.is(again.headers.get('x-should-retry'), 'false');
  // The user's token is the same user: no fresh budget there either (guest tier: free).
  t.is((await call('/v1/models', { from, headers: { authorization: `Bearer ${user.access_token}` } })).status, 429);
  clock.advance(MINUTE);
});

test.serial('guest creation has its own per-address limit; another address (or the next hour) may create more', async (t) => {
  const from = '198.51.100.30';
  for (let i = 0; i < 4; i++) t.is((await call('/llm/auth/guest-login', { method: 'POST', from })).status, 201);
  const refused = await call('/llm/auth/guest-login', { method: 'POST', from });
  t.is(refused.status, 429);
  t.like(refused.json.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  t.regex(refused.json.error.message, /per hour from this address/);
  t.is(refused.json.error.request_id, refused.headers.get('x-request-id'));
  t.is((await call('/auth/guest-login', { method: 'POST', from })).status, 429, 'the /auth alias counts too');
  t.is((await call('/llm/auth/guest-login', { method: 'POST', from: '198.51.100.31' })).status, 201);
  clock.advance(60 * MINUTE);
  t.is((await call('/llm/auth/guest-login', { method: 'POST', from })).status, 201);
});

test.serial('an upgraded guest keeps the guest tier until an admin verifies the address; then the user tier applies', async (t) => {
  const from = '198.51.100.40';
  const account = await guest(from);
  const email = `rotation-${randomBase62(6).toLowerCase()}@example.com`;
  const up = await call('/auth/upgrade', { method: 'POST', from, headers: { authorization: `Bearer ${account.access_token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
  t.is(up.status, 200);
  t.false(up.json.email_verified);
  clock.advance(MINUTE); // the upgrade request itself counted against the account's minute
  const refresh = async () => {
    const res = await call('/llm/auth/refresh', { method: 'POST', from, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ refresh_token: current.refresh_token }) });
    if (res.status !== 200) throw new Error(`refresh: ${res.status}`);
    current = res.json;
    return current.access_token;
  };
  let current = { access_token: account.access_token, refresh_token: account.refresh_token };
  const token = await refresh();
  const statuses = [];
  for (let i = 0; i < 5; i++) statuses.push((await call('/v1/models', { from, headers: { authorization: `Bearer ${token}` } })).status);
  t.deepEqual(statuses, [200, 200, 200, 429, 429], 'an unverified e-mail does not buy the user tier');

  const verified = await call(`/v1/admin/users/${account.user_id}`, { method: 'PATCH', from, headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ email_verified: true }) });
  t.is(verified.status, 200);
  t.true(verified.json.email_verified);
  const raised = await refresh();
  const after = [];
  for (let i = 0; i < 5; i++) after.push((await call('/v1/models', { from, headers: { authorization: `Bearer ${raised}` } })).status);
  t.deepEqual(after, [200, 200, 200, 200, 200], 'verified: the user tier (60 a minute) applies, counted on the same user bucket');
  clock.advance(MINUTE);
});

test.serial('rotating IPv6 addresses inside one /64 shares one per-address bucket; another /64 has its own', async (t) => {
  // The guest-login limit (4 an hour per address) keyed by /64: five addresses of one /64 → the fifth is refused.
  const statuses = [];
  for (let i = 1; i <= 5; i++) statuses.push((await call('/llm/auth/guest-login', { method: 'POST', from: `2001:db8:aa:1::${i.toString(16)}` })).status);
  t.deepEqual(statuses, [201, 201, 201, 201, 429]);
  t.is((await call('/llm/auth/guest-login', { method: 'POST', from: '2001:db8:aa:2::1' })).status, 201, 'a neighbouring /64 is another client');
});
