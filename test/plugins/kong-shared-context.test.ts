import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import type { ValidatedKey } from '../../plugins/api-key-auth/validator.js';
import { decodeShared, encodeShared, runPhase, SHARED_KEY, SHARED_NULL, type KongPdk } from '../../plugins/core/kong-host.js';
import type { PluginCore } from '../../plugins/core/types.js';
import { createTieredRateLimit } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';
import { sha256Hex } from '../../services/kit/core/index.js';
import { throughLuaTable } from '../kong/harness.js';

// The Kong adapter (plugins/core/kong-host.ts) driven in-process against a fake of Kong's PDK
// that keeps the PDK's shape (every call returns a promise; headers as a multimap) and what Kong
// does with `kong.ctx.shared`: the value is stored in a Lua table and sent back from it (the Kong
// harness's `throughLuaTable`, which the plugin-server tests use too). A Lua table cannot hold nil,
// so a msgpack nil (JavaScript null) in a map is gone when it comes back, and an empty table is
// sent as an empty array (lua-MessagePack packs a table without keys as one).

/** One request's PDK: the phases of the plugins of that request share its `kong.ctx.shared`. */
function fakeKong(headers: Record<string, string>) {
  const shared = new Map<string, unknown>();
  const upstream: Record<string, string[]> = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), [v]]));
  const state: { exit: null | { status: number; body: unknown }; shared: typeof shared; upstream: typeof upstream; sets: number } = { exit: null, shared, upstream, sets: 0 };
  const kong: KongPdk = {
    request: {
      getHeaders: async () => Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), [v]])),
      getHeader: async (name) => headers[name.toLowerCase()],
      getMethod: async () => 'POST',
      getPath: async () => '/v1/chat/completions',
    },
    client: {
      getForwardedIp: async () => '192.0.2.44',
      loadConsumer: async () => undefined,
      authenticate: async () => undefined,
    },
    ctx: {
      shared: {
        get: async (key) => shared.get(key),
        set: async (key, value) => void (state.sets++, shared.set(key, throughLuaTable(value))),
      },
    },
    service: {
      request: {
        setHeaders: async (set) => void Object.entries(set).forEach(([k, v]) => (upstream[k.toLowerCase()] = [v])),
        clearHeader: async (name) => void delete upstream[name.toLowerCase()],
      },
    },
    response: {
      setHeaders: async () => undefined,
      exit: async (status, body) => void (state.exit = { status, body }),
    },
    log: { warn: async () => undefined, err: async () => undefined },
  };
  return { kong, state };
}

const newKey = () => `sk_${randomBytes(24).toString('base64').replace(/[^0-9A-Za-z]/g, '').padEnd(32, 'a').slice(0, 32)}`;

/** api-key-auth (its validator answering with `answer`) then tiered-rate-limit's access phase, through the Kong adapter, for each attempt. */
async function acceptedOnKong(answer: Omit<ValidatedKey, 'user_id'>, attempts: number): Promise<number> {
  const keys = new Map<string, ValidatedKey>();
  const key = newKey();
  keys.set(key, { user_id: `user_${randomBytes(4).toString('hex')}`, ...answer });
  const auth = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: 'http://127.0.0.1:9/unused' }), {
    validate: async (apiKey) => (keys.has(apiKey) ? { kind: 'valid', key: keys.get(apiKey)! } : { kind: 'invalid' }),
  });
  // The deck's shape with a small pro tier: 2 requests a minute.
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 0, tiers: { pro: { minute: 2, day: 1000 } }, guest_tier: 'pro', default_key_tier: 'pro' }), {
    store: createLocalStore(),
    clock: new ManualClock(Date.UTC(2026, 11, 6, 12, 0, 5)),
  });
  let accepted = 0;
  for (let i = 0; i < attempts; i++) {
    const { kong, state } = fakeKong({ 'x-api-key': key });
    await runPhase(kong, auth as PluginCore, { headers: true, method: true }, 'api-key-auth');
    const refused = state.exit as { status: number } | null;
    if (refused) throw new Error(`api-key-auth answered ${refused.status}`);
    await runPhase(kong, limiter, { ip: true, path: true }, 'tiered-rate-limit');
    const limited = state.exit as { status: number } | null;
    if (!limited) accepted++;
    else if (limited.status !== 429) throw new Error(`tiered-rate-limit answered ${limited.status}`);
  }
  return accepted;
}

test('on Kong, a key an administrator set without a minute limit is not held to its tier’s (null survives kong.ctx.shared)', async (t) => {
  // custom_limits: what an administrator set on the key; a null period is "no limit" for that key.
  t.is(await acceptedOnKong({ tier: 'pro', limits: { requests_per_minute: null, requests_per_day: 1000 }, custom_limits: { requests_per_minute: null } }, 5), 5);
  t.is(
    await acceptedOnKong({ tier: 'pro', limits: { requests_per_minute: null, requests_per_day: null }, custom_limits: { requests_per_minute: null, requests_per_day: null } }, 5),
    5,
    'every period lifted (the limits record holds only nulls)',
  );
  // The same tier with nothing set on the key: the tier's 2 a minute.
  t.is(await acceptedOnKong({ tier: 'pro', limits: { requests_per_minute: 2, requests_per_day: 1000 }, custom_limits: null }, 5), 2);
});

test('the shared context keeps its nulls through a Lua table, and undefined fields are left out', (t) => {
  const context = {
    requestId: 'r-1',
    apikey: { authMethod: 'apikey', userId: 'u', email: null, emailVerified: undefined, limits: { minute: null, day: 5 }, tier: null },
    failures: [{ method: 'jwt', status: 401, message: 'Token expired' }],
  };
  const back = decodeShared(throughLuaTable(encodeShared(context)));
  t.deepEqual(back, {
    requestId: 'r-1',
    apikey: { authMethod: 'apikey', userId: 'u', email: null, limits: { minute: null, day: 5 }, tier: null },
    failures: [{ method: 'jwt', status: 401, message: 'Token expired' }],
  });
  // A string that happens to be the marker (a claim can hold anything) is still that string.
  const claims = { jwt: { userId: SHARED_NULL, username: '\u0000', email: 'plain' } };
  t.deepEqual(decodeShared(throughLuaTable(encodeShared(claims))), claims);
  // A context another host wrote as a plain table (no markers) reads as it is.
  t.deepEqual(decodeShared({ anonymous: true }), { anonymous: true });
  t.is(decodeShared(undefined), undefined);
  t.is(SHARED_KEY, 'platform_auth');
});

test('on Kong, one kong.ctx.shared.set per phase: a fresh request id is saved with what the plugin shares (a known exempt key in the rewrite phase)', async (t) => {
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 5 }), { store: createLocalStore(), clock: new ManualClock(Date.UTC(2026, 11, 6, 12, 0, 5)) });
  const key = newKey();
  // The key seen valid and exempt (enterprise) by the limiter's access phase.
  const seen = fakeKong({});
  seen.state.shared.set(SHARED_KEY, encodeShared({ requestId: 'req-seen', apikey: { authMethod: 'apikey', userId: 'u_ent', subject: 'u_ent', email: null, username: null, isGuest: false, tier: 'enterprise', bucket: `key:${sha256Hex(key)}` } }));
  await runPhase(seen.kong, limiter, { ip: true, path: true }, 'tiered-rate-limit');
  t.is(seen.state.exit, null);

  const { kong, state } = fakeKong({ 'x-api-key': key, 'x-request-id': 'req-exempt' });
  await runPhase(kong, limiter, { ip: true, path: true, headers: true }, 'tiered-rate-limit', 'rewrite');
  t.is(state.exit, null);
  t.is(state.sets, 1, 'the request id and the count left to the access phase, saved together');
  t.like(decodeShared(state.shared.get(SHARED_KEY)), { requestId: 'req-exempt', ipCountAtAccess: true });

  const plain = fakeKong({ 'x-request-id': 'req-plain' });
  await runPhase(plain.kong, limiter, { ip: true, path: true, headers: true }, 'tiered-rate-limit', 'rewrite');
  t.is(plain.state.sets, 1, 'a decision that shares nothing still saves the fresh request id');
  t.like(decodeShared(plain.state.shared.get(SHARED_KEY)), { requestId: 'req-plain' });
  await runPhase(plain.kong, limiter, { ip: true, path: true }, 'tiered-rate-limit');
  t.is(plain.state.sets, 1, 'a later phase that changes nothing saves nothing');
});
