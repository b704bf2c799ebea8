import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DeckPlugin } from '../../services/gateway/deck.js';
import { offsetClock, offsetToNextMinute, unixSeconds, type Clock } from '../../services/kit/clock.js';
import { GATEWAY_TOKEN, startEdgeWithFakes } from '../gateway/edge-harness.js';
import { buildPluginsInto, GLOBAL, startPluginServer, type KongScope, type PluginServer } from './harness.js';

// The same requests through both plugin hosts, answered identically (status, body, the headers the
// edge generates, and what reaches the upstream): the embedded edge (services/gateway) and Kong,
// played by the real kong-js-pluginserver running the esbuild bundles, driven phase by phase in
// Kong's order (rewrite: tiered-rate-limit; access: jwt-auth 1450 → api-key-auth 1250 →
// identity-headers 1000 → tiered-rate-limit 910 → the anonymous consumer's request-termination).
// Both hosts get their plugin configuration from the same rendered deck/kong.yaml.
// Both hosts count per fixed minute window, so both run on one clock offset from the real clock:
// the embedded edge through `offsetClock`, Kong's plugin servers (processes of their own) through
// the harness's preloaded clock shift. The offset puts both at second 1 of a minute window when
// they start, and the whole file runs in that one window: no pair straddles a boundary, where one
// host would count again from zero and the other not.
const EDGE_HEADERS = ['x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-limit-minute', 'x-ratelimit-remaining-minute', 'x-should-retry', 'www-authenticate', 'content-type'];
// Values that depend on the instant each host computed them (the same window, possibly a second apart).
const PRESENCE_ONLY = ['x-ratelimit-reset', 'retry-after'];
const UPSTREAM_IDENTITY = ['x-auth-method', 'x-user-id', 'x-user-subject', 'x-user-email', 'x-user-username', 'x-user-key-id', 'x-gateway-token', 'x-request-id', 'x-api-key', 'authorization'];

let dist: string;
const servers = new Map<string, PluginServer>();
const instances = new Map<string, number>();
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;
let clock: Clock;

test.before(async () => {
  dist = mkdtempSync(join(tmpdir(), 'kong-parity-'));
  buildPluginsInto(dist);
  const clockOffsetMs = offsetToNextMinute();
  clock = offsetClock(clockOffsetMs);
  edge = await startEdgeWithFakes({
    clock,
    vars: {
      DECK_API_KEY_TIMEOUT_MS: '2000',
      DECK_RATE_LIMIT_IP_PER_MINUTE: '100000',
      DECK_RATE_LIMIT_FREE_PER_MINUTE: '3',
      // No Origin is sent, and a named origin makes the bundled cors plugin stay silent on both hosts.
      DECK_CORS_ORIGINS: '["https://app.example"]',
    },
  });
  const { deck } = edge;

  // Kong's instances, configured from the same rendered file (llm-api's service plugins, the globals).
  const llmApi = deck.services!.find((s) => s.name === 'llm-api')!;
  const configOf = (list: DeckPlugin[] | undefined, name: string) => {
    const config = { ...list!.find((p) => p.name === name)!.config! };
    delete config.redis_url; // the host-less revocation subscription is not part of these scenarios
    return config;
  };
  // Where the file puts each (Kong adds the scope to the configuration it sends): the auth
  // plugins on the llm-api service (its id is Kong's, drawn when decK creates it), the others global.
  const onLlmApi: KongScope = { service: '7c3e9a51-0000-4000-8000-0000000011a1' };
  const plan: Array<[string, Record<string, unknown>, KongScope]> = [
    ['jwt-auth', configOf(llmApi.plugins, 'jwt-auth'), onLlmApi],
    ['api-key-auth', configOf(llmApi.plugins, 'api-key-auth'), onLlmApi],
    ['identity-headers', configOf(deck.plugins, 'identity-headers'), GLOBAL],
    ['tiered-rate-limit', configOf(deck.plugins, 'tiered-rate-limit'), GLOBAL],
  ];
  await Promise.all(
    plan.map(async ([name, config, scope]) => {
      const server = await startPluginServer(join(dist, name), { clockOffsetMs });
      servers.set(name, server);
      instances.set(name, await server.start(name, config, scope));
    }),
  );
});

test.after.always(async () => {
  await Promise.all([...servers.values()].map((s) => s.stop()));
  await edge?.close();
  if (dist) rmSync(dist, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: unknown;
  headers: Record<string, string>;
  present: string[];
}

function project(status: number, body: unknown, headers: Record<string, string>): Answer {
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) lower[k.toLowerCase()] = String(v);
  const picked: Record<string, string> = {};
  for (const name of EDGE_HEADERS) if (lower[name] !== undefined) picked[name] = lower[name]!.replace(/\s+/g, ' ');
  // What the upstream saw, reduced to what the edge is responsible for.
  let shown = body;
  if (status === 200 && body && typeof body === 'object' && 'headers' in body) {
    const seen = (body as { headers: Record<string, string | string[]> }).headers;
    const identity: Record<string, string> = {};
    for (const name of UPSTREAM_IDENTITY) if (seen[name] !== undefined) identity[name] = String(seen[name]);
    shown = { upstream: identity };
  }
  return { status, body: shown, headers: picked, present: PRESENCE_ONLY.filter((name) => lower[name] !== undefined) };
}

async function throughEmbedded(headers: Record<string, string>): Promise<Answer> {
  const res = await fetch(`${edge.url}/v1/models`, { headers });
  const text = await res.text();
  const responseHeaders: Record<string, string> = {};
  res.headers.forEach((value, name) => (responseHeaders[name] = value));
  // The upstream's own headers are not the edge's: only what the edge adds is compared.
  delete responseHeaders['content-type'];
  const body = text ? JSON.parse(text) : null;
  if (res.status !== 200) responseHeaders['content-type'] = res.headers.get('content-type') ?? '';
  return project(res.status, body, responseHeaders);
}

async function throughKong(headers: Record<string, string>): Promise<Answer> {
  const shared: Record<string, unknown> = {};
  let current: Record<string, string | string[]> = { ...headers, host: 'edge.test' };
  const responseHeaders: Record<string, string> = {};
  let consumer: unknown = null;
  const steps: Array<[string, 'rewrite' | 'access']> = [
    ['tiered-rate-limit', 'rewrite'],
    ['jwt-auth', 'access'],
    ['api-key-auth', 'access'],
    ['identity-headers', 'access'],
    ['tiered-rate-limit', 'access'],
  ];
  for (const [name, phase] of steps) {
    const result = await servers.get(name)!.run(instances.get(name)!, { method: 'GET', path: '/v1/models', headers: current, forwardedIp: '127.0.0.1' }, shared, phase);
    Object.assign(responseHeaders, result.responseHeaders);
    if (result.authenticated) consumer = result.authenticated.consumer;
    if (result.exit) {
      const exitHeaders = Object.fromEntries(Object.entries(result.exit.headers ?? {}).map(([k, v]) => [k, String(v)]));
      return project(result.exit.status, result.exit.body === undefined ? null : JSON.parse(String(result.exit.body)), { ...responseHeaders, ...exitHeaders });
    }
    if (result.status !== null) throw new Error(`${name} ${phase}: Kong would answer ${result.status} (${result.logs.join('; ')})`);
    // Kong's later plugins read the request as the earlier ones left it (set/cleared headers).
    current = Object.fromEntries(Object.entries(result.upstreamHeaders).map(([k, v]) => [k, v.length === 1 ? v[0]! : v]));
  }
  if (consumer && (consumer as { username?: string }).username === 'anonymous') {
    throw new Error('the anonymous consumer reached request-termination: identity-headers should have answered first');
  }
  // Proxied: the upstream sees the request as the plugins left it.
  const seen: Record<string, string> = {};
  for (const [k, v] of Object.entries(current)) seen[k] = Array.isArray(v) ? v.join(', ') : v;
  return project(200, { headers: seen }, responseHeaders);
}

/** Tokens are issued on the hosts' clock. */
const now = () => unixSeconds(clock);
let sequence = 0;

async function same(t: import('ava').ExecutionContext, headers: Record<string, string>, expectedStatus: number): Promise<Answer> {
  const withId = { 'x-request-id': `parity-${process.pid}-${++sequence}`, ...headers };
  const embedded = await throughEmbedded(withId);
  const kong = await throughKong(withId);
  t.deepEqual(kong, embedded, `both hosts answer ${JSON.stringify(headers)} identically`);
  t.is(embedded.status, expectedStatus);
  return embedded;
}

test.serial('JWT: accepted with the same identity upstream', async (t) => {
  const token = await edge.issuer.sign({}, { sub: 'user_parity_jwt', iat: now() - 5 });
  const answer = await same(t, { authorization: `Bearer ${token}` }, 200);
  t.like((answer.body as { upstream: object }).upstream, { 'x-auth-method': 'jwt', 'x-user-id': 'user_parity_jwt', 'x-gateway-token': GATEWAY_TOKEN });
});

test.serial('API key: X-API-Key and Authorization: Bearer sk_… accepted; the key never reaches the upstream', async (t) => {
  const key = edge.validator.add('user_parity_key', 'pro');
  const viaHeader = await same(t, { 'x-api-key': key.key }, 200);
  t.like((viaHeader.body as { upstream: object }).upstream, { 'x-auth-method': 'apikey', 'x-user-id': 'user_parity_key' });
  t.false('x-api-key' in (viaHeader.body as { upstream: object }).upstream);
  const viaBearer = await same(t, { authorization: `Bearer ${key.key}` }, 200);
  t.false('authorization' in (viaBearer.body as { upstream: object }).upstream);
});

test.serial('neither credential: 401 with the request id, identically', async (t) => {
  const answer = await same(t, {}, 401);
  t.like((answer.body as { error: object }).error, { type: 'auth_error', code: 'unauthorized' });
  await same(t, { authorization: 'Bearer not-a-key' }, 401);
  await same(t, { 'x-api-key': 'sk_malformed' }, 401);
  const key = edge.validator.add('user_parity_repeated', 'pro');
  const repeated = await same(t, { 'x-api-key': `${key.key}, ${key.key}` }, 401);
  t.like((repeated.body as { error: object }).error, { param: 'X-API-Key' });
});

test.serial('both: same user accepted; different users 401; one refused beside one valid → the valid one (OR logic); both refused → 401', async (t) => {
  const token = await edge.issuer.sign({}, { sub: 'user_parity_both', iat: now() - 5 });
  const stale = await edge.issuer.sign({}, { sub: 'user_parity_both', iat: now() - 4000, exp: now() - 100 });
  const own = edge.validator.add('user_parity_both', 'pro');
  const other = edge.validator.add('user_parity_other', 'pro');
  await same(t, { authorization: `Bearer ${token}`, 'x-api-key': own.key }, 200);
  await same(t, { authorization: `Bearer ${token}`, 'x-api-key': other.key }, 401);
  const staleToken = await same(t, { authorization: `Bearer ${stale}`, 'x-api-key': own.key }, 200);
  t.like((staleToken.body as { upstream: object }).upstream, { 'x-auth-method': 'apikey' });
  await same(t, { authorization: `Bearer ${token}`, 'x-api-key': `sk_${'Q'.repeat(32)}` }, 200);
  await same(t, { authorization: `Bearer ${stale}`, 'x-api-key': `sk_${'Q'.repeat(32)}` }, 401);
});

test.serial('spoofed identity headers after more header lines than Kong reads by default are still stripped; from 1000 lines on, 431 on both hosts', async (t) => {
  const padding = (lines: number) => Object.fromEntries(Array.from({ length: lines }, (_, i) => [`h${i}`, '1']));
  const key = edge.validator.add('user_parity_padded', 'pro');
  const spoof = { 'x-user-email': 'root@x', 'x-user-username': 'root', 'x-auth-method': 'jwt' };
  const answer = await same(t, { ...padding(150), 'x-api-key': key.key, ...spoof }, 200);
  const upstream = (answer.body as { upstream: Record<string, string> }).upstream;
  t.like(upstream, { 'x-user-id': 'user_parity_padded', 'x-auth-method': 'apikey' });
  t.not(upstream['x-user-email'], 'root@x');
  t.not(upstream['x-user-username'], 'root');
  const refused = await same(t, { ...padding(1000), 'x-api-key': key.key, ...spoof }, 431);
  t.like((refused.body as { error: object }).error, { type: 'invalid_request_error', code: 'request_header_fields_too_large', param: 'headers' });
});

test.serial('spoofed identity headers: stripped, replaced by the verified identity, or refused without a credential', async (t) => {
  const spoof = { 'x-user-id': 'admin', 'x-auth-method': 'jwt', 'x-user-email': 'root@x', 'x-gateway-token': 'forged' };
  const key = edge.validator.add('user_parity_honest', 'pro');
  const answer = await same(t, { ...spoof, 'x-api-key': key.key }, 200);
  t.like((answer.body as { upstream: object }).upstream, { 'x-user-id': 'user_parity_honest', 'x-auth-method': 'apikey', 'x-gateway-token': GATEWAY_TOKEN });
  await same(t, spoof, 401);
});

test.serial('rate limit: the fourth request of a free key in a minute is refused identically (429, headers)', async (t) => {
  const key = edge.validator.add('user_parity_free', 'free');
  for (let i = 0; i < 3; i++) await same(t, { 'x-api-key': key.key }, 200);
  const refused = await same(t, { 'x-api-key': key.key }, 429);
  t.like((refused.body as { error: object }).error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
  t.deepEqual(refused.present.sort(), ['retry-after', 'x-ratelimit-reset']);
});

test.serial('an external issuer’s user (token sub = the issuer id; key owner = the platform id, subject = that sub): accepted together and one budget, identically', async (t) => {
  const sub = `kc-${process.pid}-0000-4000-8000-parity`;
  const token = await edge.issuer.sign({}, { sub, iat: now() - 5 });
  const key = edge.validator.add('user_parity_platform_id', 'free', null, sub);
  await same(t, { authorization: `Bearer ${token}`, 'x-api-key': key.key }, 200);
  // The token's request counted on the person's bucket: the free key has two of its three left.
  await same(t, { 'x-api-key': key.key }, 200);
  await same(t, { 'x-api-key': key.key }, 200);
  await same(t, { 'x-api-key': key.key }, 429);
  const stranger = edge.validator.add('user_parity_platform_id', 'free', null, `kc-${process.pid}-other`);
  await same(t, { authorization: `Bearer ${token}`, 'x-api-key': stranger.key }, 401);
});

test.serial('a key an administrator lifted the minute limit of (null: no limit, not the tier’s) is not held to its tier’s, identically', async (t) => {
  // The free tier allows 3 a minute; the key's own minute limit is null. On Kong the identity goes
  // from api-key-auth to the rate limiter through kong.ctx.shared, a Lua table that keeps no null.
  const key = edge.validator.add('user_parity_unlimited', 'free', { requests_per_minute: null, requests_per_day: 100000 });
  for (let i = 0; i < 5; i++) await same(t, { 'x-api-key': key.key }, 200);
});

test.serial('limits an administrator set on a pro key (as the validator reports them: the tier defaults with the key’s own over them) hold identically', async (t) => {
  const key = edge.validator.add('user_parity_throttled', 'pro', { requests_per_minute: 2, requests_per_day: 100000 });
  const first = await same(t, { 'x-api-key': key.key }, 200);
  t.is(first.headers['x-ratelimit-limit'], '2');
  await same(t, { 'x-api-key': key.key }, 200);
  await same(t, { 'x-api-key': key.key }, 429);
});
