import test from 'ava';
import { createCors } from '../../services/gateway/bundled/cors.js';
import { createRequestTermination } from '../../services/gateway/bundled/request-termination.js';
import { createClientIp } from '../../services/gateway/client-ip.js';
import { DeckError, renderDeck } from '../../services/gateway/deck.js';
import type { EdgeRequest } from '../../plugins/core/types.js';
import { ipv6Prefix } from '../../plugins/core/address.js';

const req = (method: string, headers: Record<string, string>): EdgeRequest => ({ method, path: '/v1/x', headers, clientIp: '', shared: {} });

test('cors: preflight from an allowed origin is answered with the allow headers', async (t) => {
  const cors = createCors({ origins: ['https://app.example', 'https://.*\\.example\\.org'], headers: ['Authorization', 'X-API-Key'], methods: ['GET', 'POST'], max_age: 600, exposed_headers: ['X-Request-ID'] });
  const d = await cors.access(req('OPTIONS', { origin: 'https://app.example', 'access-control-request-method': 'POST' }));
  t.is(d.kind, 'respond');
  if (d.kind !== 'respond') return;
  t.is(d.status, 200);
  t.like(d.headers, { 'Access-Control-Allow-Origin': 'https://app.example', 'Access-Control-Allow-Headers': 'Authorization,X-API-Key', 'Access-Control-Allow-Methods': 'GET,POST', 'Access-Control-Max-Age': '600', Vary: 'Origin' });
  const regex = await cors.access(req('OPTIONS', { origin: 'https://a.example.org', 'access-control-request-method': 'GET' }));
  t.is(regex.kind === 'respond' ? regex.headers?.['Access-Control-Allow-Origin'] : null, 'https://a.example.org');
});

test('cors: an origin not allowed gets no allow-origin header; a plain OPTIONS is not a preflight', async (t) => {
  const cors = createCors({ origins: ['https://app.example'] });
  const d = await cors.access(req('OPTIONS', { origin: 'https://evil.example', 'access-control-request-method': 'POST' }));
  t.false(d.kind === 'respond' && 'Access-Control-Allow-Origin' in (d.headers ?? {}));
  t.is((await cors.access(req('OPTIONS', { origin: 'https://app.example' }))).kind, 'continue');
  const actual = await cors.access(req('GET', { origin: 'https://evil.example' }));
  t.deepEqual(actual.kind === 'continue' ? actual.responseHeaders : null, { Vary: 'Origin' });
});

test('request-termination: message → {"message"}, body → raw with its content type', async (t) => {
  const msg = await createRequestTermination({ status_code: 403, message: 'no' }).access(req('GET', {}));
  t.deepEqual(msg, { kind: 'respond', status: 403, body: { message: 'no' } });
  const raw = await createRequestTermination({ status_code: 401, body: '{"a":1}', content_type: 'application/json' }).access(req('GET', {}));
  t.true(raw.kind === 'respond' && Buffer.isBuffer(raw.body) && raw.body.toString() === '{"a":1}');
});

test('client IP: the socket peer, unless it is a trusted proxy; then the right-most untrusted X-Forwarded-For hop', (t) => {
  const ip = createClientIp(['10.0.0.0/8', '192.0.2.1']);
  t.is(ip('203.0.113.5', '198.51.100.1'), '203.0.113.5', 'untrusted peer: XFF ignored (cannot spoof the per-IP limit)');
  t.is(ip('10.1.2.3', '198.51.100.1'), '198.51.100.1');
  t.is(ip('::ffff:10.1.2.3', '198.51.100.9, 203.0.113.7, 10.9.9.9, 192.0.2.1'), '203.0.113.7', 'spoofed left-most entries are skipped');
  t.is(ip('10.1.2.3', undefined), '10.1.2.3');
  t.is(ip('10.1.2.3', 'garbage'), '10.1.2.3');
  t.is(createClientIp([])('::ffff:127.0.0.1', '1.2.3.4'), '127.0.0.1');
  // Malformed entries are refused (the setting itself is checked when read: test/platform/startup-errors.test.ts).
  for (const entry of ['not-an-ip', '10.0.0.0/abc', '10.0.0.0/33', '10.0.0.0/8/1']) t.throws(() => createClientIp([entry]), { message: /is not an address or CIDR range/ }, entry);
  // Every spelling of an IPv4-mapped address is its IPv4 address, as the egress guard reads it.
  t.is(ip('::ffff:a01:203', '::ffff:cb00:7107, ::FFFF:10.9.9.9'), '203.0.113.7', 'hex-mapped peer and hops are unmapped');
  t.is(ip('64:ff9b::a01:203', '198.51.100.1'), '64:ff9b::a01:203', 'a NAT64 peer is another host: not trusted as 10.1.2.3');
});

test('per-address keys: an IPv6 client is keyed by its prefix, an IPv4-mapped one (any spelling) by its IPv4 address', (t) => {
  t.is(ipv6Prefix('2001:db8:1:2:3:4:5:6', 64), '2001:db8:1:2:0:0:0:0/64');
  t.is(ipv6Prefix('2001:db8:1:2:3:4:5:6', 48), '2001:db8:1:0:0:0:0:0/48');
  t.is(ipv6Prefix('fe80::1%eth0', 64), 'fe80:0:0:0:0:0:0:0/64', 'a zone id is not part of the address');
  t.is(ipv6Prefix('::ffff:192.0.2.1', 64), '192.0.2.1');
  t.is(ipv6Prefix('::ffff:c000:201', 64), '192.0.2.1');
  t.is(ipv6Prefix('192.0.2.1', 64), '192.0.2.1');
});

test('deck rendering: decK env semantics (DECK_ prefix, unset is an error, toInt checked, comments skipped)', (t) => {
  t.is(renderDeck('a: ${{ env "DECK_A" }}\nb: ${{ env "DECK_B" | toInt }}', { DECK_A: 'x', DECK_B: '5' }), 'a: x\nb: 5');
  t.is(renderDeck('# ${{ env "DECK_MISSING" }}', {}), '# ${{ env "DECK_MISSING" }}');
  t.throws(() => renderDeck('a: ${{ env "DECK_MISSING" }}', {}), { instanceOf: DeckError, message: /DECK_MISSING is not set/ });
  t.throws(() => renderDeck('a: ${{ env "HOME" }}', { HOME: '/root' }), { message: /must start with DECK_/ });
  t.throws(() => renderDeck('a: ${{ env "DECK_N" | toInt }}', { DECK_N: 'many' }), { message: /not an integer/ });
});

test('plugin chains: enabled plugins the embedded gateway cannot run stop the start; disabled ones are skipped; route beats service beats global', async (t) => {
  const { buildChains } = await import('../../services/gateway/chain.js');
  const { parseDeck } = await import('../../services/gateway/deck.js');
  const { createInProcessRevocations } = await import('../../services/kit/revocations.js');
  const deps = { clock: { now: () => 0 }, logger: { warn() {}, error() {} }, revocations: createInProcessRevocations() };
  const base = (plugins: string) => parseDeck(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    plugins: [{ name: request-termination, config: { status_code: 402 } }]
    routes:
      - { name: r1, paths: ['~/a'], plugins: [{ name: request-termination, config: { status_code: 403 } }] }
      - { name: r2, paths: ['~/b'] }
plugins:
${plugins}
`, {});
  await t.throwsAsync(buildChains(base('  - { name: oauth2, config: {} }'), deps), { message: /oauth2 is enabled but the embedded gateway cannot run it/ });
  const { chains } = await buildChains(base('  - { name: oauth2, enabled: false }\n  - { name: request-termination, config: { status_code: 401 } }\n  - { name: cors, config: { origins: ["*"] } }'), deps);
  const [r1, r2] = [...chains.entries()].sort(([a], [b]) => a.name.localeCompare(b.name));
  const statusOf = async (entries: typeof r1[1]) => {
    const termination = entries.find((e) => e.name === 'request-termination')!;
    const d = await termination.entry!.core.access({ method: 'GET', path: '/', headers: {}, clientIp: '', shared: {} });
    return d.kind === 'respond' ? d.status : 0;
  };
  t.deepEqual(r1![1].map((e) => e.name), ['cors', 'request-termination']);
  t.is(await statusOf(r1![1]), 403, 'route-level config wins');
  t.is(await statusOf(r2![1]), 402, 'service-level config beats the global one');
});

test("plugin chains: Kong's prometheus is accepted and not run (the embedded edge has its own /metrics), its config checked; other unknown plugins still stop the start", async (t) => {
  const { buildChains } = await import('../../services/gateway/chain.js');
  const { parseDeck } = await import('../../services/gateway/deck.js');
  const { createInProcessRevocations } = await import('../../services/kit/revocations.js');
  const deps = { clock: { now: () => 0 }, logger: { warn() {}, error() {} }, revocations: createInProcessRevocations() };
  const deck = (plugins: string) => parseDeck(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    routes: [{ name: r, paths: ['~/a'], plugins: [{ name: prometheus, config: { status_code_metrics: true } }] }]
plugins:
  - { name: request-termination, config: { status_code: 401 } }
${plugins}
`, {});
  const { chains, rewriteChain } = await buildChains(deck('  - { name: prometheus, config: { per_consumer: false, status_code_metrics: true, latency_metrics: true, bandwidth_metrics: true, upstream_health_metrics: false } }'), deps);
  t.deepEqual([...chains.values()].map((chain) => chain.map((e) => e.name)), [['request-termination']], 'nothing of prometheus runs on any route');
  t.deepEqual(rewriteChain.map((e) => e.name), []);
  // A config Kong would refuse is refused here too, naming the plugin and the field.
  await t.throwsAsync(buildChains(deck('  - { name: prometheus, config: { per_consumer: "yes" } }'), deps), { instanceOf: DeckError, message: /plugin prometheus \(global\): config\.per_consumer: expected a boolean/ });
  await t.throwsAsync(buildChains(deck('  - { name: prometheus, config: { per_consumers: false } }'), deps), { instanceOf: DeckError, message: /config\.per_consumers: unknown field/ });
  // Only plugins named one by one are accepted without running: another one still stops the start.
  await t.throwsAsync(buildChains(deck('  - { name: statsd, config: {} }'), deps), { instanceOf: DeckError, message: /statsd is enabled but the embedded gateway cannot run it/ });
});

test("plugin chains: the embedded gateway's rate limiter follows the revocation channel, so a key it saw valid is counted once, in the access phase", async (t) => {
  const { buildChains } = await import('../../services/gateway/chain.js');
  const { parseDeck } = await import('../../services/gateway/deck.js');
  const { createInProcessRevocations, sha256Hex } = await import('../../services/kit/core/index.js');
  const revocations = createInProcessRevocations();
  const deps = { clock: { now: () => 0 }, logger: { warn() {}, error() {} }, revocations };
  const deck = parseDeck(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    routes: [{ name: r, paths: ['~/a'] }]
plugins:
  - { name: tiered-rate-limit, config: { policy: local } }
`, {});
  const { rewriteChain, close } = await buildChains(deck, deps);
  const limiter = rewriteChain.find((e) => e.name === 'tiered-rate-limit')!.core;
  const apiKey = `sk_${'k'.repeat(32)}`;
  const identity = { authMethod: 'apikey' as const, userId: 'user_chain', subject: 'user_chain', email: null, username: null, isGuest: false, tier: 'pro', limits: null, bucket: `key:${sha256Hex(apiKey)}` };
  const request = () => ({ method: 'GET', path: '/a', headers: { 'x-api-key': apiKey }, clientIp: '192.0.2.7', shared: {} });
  const first = request();
  t.is((await limiter.rewrite!(first)).kind, 'continue');
  await limiter.access({ ...first, shared: { apikey: identity } });
  t.deepEqual(await limiter.rewrite!(request()), { kind: 'continue', share: { ipCountAtAccess: true } });
  await revocations.publish(sha256Hex(apiKey));
  t.like(await limiter.rewrite!(request()), { kind: 'continue', responseHeaders: { 'X-RateLimit-Remaining-minute': '98' } }, 'forgotten on revocation: counted before authentication again');
  await close();
});
