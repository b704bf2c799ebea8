import test from 'ava';
import { runPhase, type KongPdk, type Needs } from '../../plugins/core/kong-host.js';
import type { PluginCore } from '../../plugins/core/types.js';
import { createIdentityHeaders } from '../../plugins/identity-headers/core.js';
import { parseIdentityHeadersConfig } from '../../plugins/identity-headers/schema.js';
import { createTieredRateLimit } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';
import { sha256Hex } from '../../services/kit/secrets.js';
import { throughLuaTable } from '../kong/harness.js';

// A header sent on several lines. Kong hands a plugin each of its lines (`get_headers`: name →
// array); the embedded edge reads Node's `req.headers`, where a repeated header is one value, its
// lines joined with ", " (`authorization` and Node's other single-value fields: the first line only,
// and only that line goes upstream). The same core must read the same request the same way on both
// hosts, so the Kong adapter hands the cores the lines as Node does, and the upstream request gets one
// Authorization, as from the embedded edge.

/** One request's PDK, with Kong's shapes (every call a promise, headers a multimap). */
function fakeKong(headers: Record<string, string[]>, ip = '192.0.2.44') {
  const shared = new Map<string, unknown>();
  const upstream: Record<string, string[]> = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [...v]]));
  const state: { exit: null | { status: number; body: unknown; headers?: Record<string, string> }; upstream: typeof upstream; response: Record<string, string> } = { exit: null, upstream, response: {} };
  const kong: KongPdk = {
    request: {
      // What Kong's get_headers reads is the request as the earlier plugins left it.
      getHeaders: async () => Object.fromEntries(Object.entries(upstream).map(([k, v]) => [k, [...v]])),
      getHeader: async (name) => upstream[name.toLowerCase()]?.[0],
      getMethod: async () => 'POST',
      getPath: async () => '/v1/chat/completions',
    },
    client: { getForwardedIp: async () => ip, loadConsumer: async () => undefined, authenticate: async () => undefined },
    ctx: { shared: { get: async (key) => shared.get(key), set: async (key, value) => void shared.set(key, throughLuaTable(value)) } },
    service: {
      request: {
        setHeaders: async (set) => void Object.entries(set).forEach(([k, v]) => (upstream[k.toLowerCase()] = [v])),
        clearHeader: async (name) => void delete upstream[name.toLowerCase()],
      },
    },
    response: {
      setHeaders: async (set) => void Object.assign(state.response, set),
      exit: async (status, body, exitHeaders) => void (state.exit = { status, body, headers: exitHeaders }),
    },
    log: { warn: async () => undefined, err: async () => undefined },
  };
  return { kong, state, shared };
}

const identityHeaders = (): PluginCore => createIdentityHeaders(parseIdentityHeadersConfig({ gateway_token: 'gw-token' }));
const HEADERS: Needs = { headers: true };

test('a repeated X-Request-ID is no one id on either host: Kong gets a fresh one too, not the first line', async (t) => {
  const { kong, state } = fakeKong({ 'x-request-id': ['req-first', 'req-second'] });
  await runPhase(kong, identityHeaders(), HEADERS, 'identity-headers');
  t.is(state.exit, null);
  const sent = state.upstream['x-request-id'];
  t.is(sent?.length, 1);
  t.not(sent?.[0], 'req-first');
  t.regex(sent![0]!, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  t.is(state.response['X-Request-ID'], sent![0]);

  // One line is taken as it is, as before.
  const single = fakeKong({ 'x-request-id': ['req-only'] });
  await runPhase(single.kong, identityHeaders(), HEADERS, 'identity-headers');
  t.deepEqual(single.state.upstream['x-request-id'], ['req-only']);
});

test('a repeated Authorization reaches the upstream as its first line only, as from the embedded edge', async (t) => {
  const key = `sk_${'A'.repeat(32)}`;
  const { kong, state } = fakeKong({ authorization: ['Bearer header.payload.signature', `Bearer ${key}`], accept: ['a/b', 'c/d'] });
  await runPhase(kong, identityHeaders(), HEADERS, 'identity-headers');
  t.is(state.exit, null);
  t.deepEqual(state.upstream.authorization, ['Bearer header.payload.signature'], 'the second line (here an API key) never goes upstream');
  t.deepEqual(state.upstream.accept, ['a/b', 'c/d'], 'other repeated headers are forwarded as they came');

  const single = fakeKong({ authorization: ['Bearer header.payload.signature'] });
  await runPhase(single.kong, identityHeaders(), HEADERS, 'identity-headers');
  t.deepEqual(single.state.upstream.authorization, ['Bearer header.payload.signature']);
});

test('a repeated key header is no key on either host: an exempt key beside another value does not skip the per-address limit', async (t) => {
  const clock = new ManualClock(Date.UTC(2026, 11, 7, 12, 0, 5));
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 1 }), { store: createLocalStore(), clock });
  const key = `sk_${'E'.repeat(32)}`;
  const ip = '198.51.100.77';
  // The key was seen valid and exempt (enterprise) on a request the limiter's access phase counted.
  const seen = fakeKong({}, '198.51.100.1');
  seen.shared.set('platform_auth', { requestId: 'req-seen', apikey: { authMethod: 'apikey', userId: 'u_ent', subject: 'u_ent', email: null, username: null, isGuest: false, tier: 'enterprise', bucket: `key:${sha256Hex(key)}` } });
  await runPhase(seen.kong, limiter, { ip: true, path: true }, 'tiered-rate-limit');
  t.is(seen.state.exit, null);

  // That key alone skips the per-address count: the exemption works.
  const spent = fakeKong({}, ip);
  await runPhase(spent.kong, limiter, { ip: true, path: true, headers: true }, 'tiered-rate-limit', 'rewrite');
  t.is(spent.state.exit, null, 'the address spends its one request');
  const exempt = fakeKong({ 'x-api-key': [key] }, ip);
  await runPhase(exempt.kong, limiter, { ip: true, path: true, headers: true }, 'tiered-rate-limit', 'rewrite');
  t.is(exempt.state.exit, null, 'the exempt key is not held to the address limit');

  // Sent twice, the header names no one key (the embedded edge reads "sk_…, other"): counted, refused.
  const repeated = fakeKong({ 'x-api-key': [key, 'other'] }, ip);
  await runPhase(repeated.kong, limiter, { ip: true, path: true, headers: true }, 'tiered-rate-limit', 'rewrite');
  t.is(repeated.state.exit?.status, 429);
});

test('the 431 for too many header lines carries a fresh request id, not the first of a repeated X-Request-ID', async (t) => {
  const padding = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`h${i}`, ['1']]));
  const { kong, state } = fakeKong({ 'x-request-id': ['req-first', 'req-second'], ...padding });
  await runPhase(kong, identityHeaders(), HEADERS, 'identity-headers');
  t.is(state.exit?.status, 431);
  const id = state.exit?.headers?.['X-Request-ID'];
  t.not(id, 'req-first');
  t.regex(String(id), /^[0-9a-f]{8}-[0-9a-f]{4}-/);
  t.is((JSON.parse(String(state.exit!.body)) as { error: { request_id: string } }).error.request_id, String(id));
});
