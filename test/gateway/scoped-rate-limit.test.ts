import test from 'ava';
import { buildChains } from '../../services/gateway/chain.js';
import { parseDeck, type DeckRoute } from '../../services/gateway/deck.js';
import { createInProcessRevocations } from '../../services/kit/core/index.js';
import type { EdgeRequest } from '../../plugins/core/types.js';

// Kong runs a plugin's rewrite phase for global instances only, and so does the embedded edge
// (`rewriteChain`): a route-, service- or consumer-scoped limiter on the default
// `ip_limit_phase: rewrite` counts the address in its access phase instead, the only one it runs.
const deps = () => ({ clock: { now: () => 30_000 }, logger: { warn() {}, error() {} }, revocations: createInProcessRevocations() });

const LIMITER = '{ name: tiered-rate-limit, config: { ip_per_minute: 2, policy: local } }';

function deckWith(placement: 'route' | 'service' | 'consumer' | 'global') {
  const onRoute = placement === 'route' ? `, plugins: [${LIMITER}]` : '';
  const onService = placement === 'service' ? `    plugins: [${LIMITER}]\n` : '';
  const consumers = placement === 'consumer' ? `consumers:\n  - username: anonymous\n    plugins: [${LIMITER}]\n` : '';
  const global = placement === 'global' ? `plugins:\n  - ${LIMITER}\n` : '';
  return parseDeck(
    `
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
${onService}    routes: [{ name: r, paths: ['~/a']${onRoute} }]
${consumers}${global}`,
    {},
  );
}

const request = (clientIp: string): EdgeRequest => ({ method: 'GET', path: '/a', headers: {}, clientIp, shared: {} });

for (const placement of ['route', 'service', 'consumer'] as const) {
  test(`a ${placement}-scoped limiter on the default rewrite phase counts and refuses the address in its access phase`, async (t) => {
    const { chains, rewriteChain, close } = await buildChains(deckWith(placement), deps());
    t.teardown(close);
    t.deepEqual(rewriteChain, [], 'a scoped instance never runs in the rewrite phase');
    const [route] = [...chains.keys()] as [DeckRoute];
    const slot = chains.get(route)!.find((e) => e.name === 'tiered-rate-limit')!;
    t.is(slot.entry === null, placement === 'consumer', 'a consumer-scoped instance runs for its consumer only');
    const limiter = placement === 'consumer' ? slot.byConsumer!.get('anonymous')! : slot.entry!;
    const decisions = [];
    for (let i = 0; i < 3; i++) decisions.push(await limiter.core.access(request('192.0.2.41')));
    t.like(decisions[0], { kind: 'continue', responseHeaders: { 'X-RateLimit-Limit-minute': '2', 'X-RateLimit-Remaining-minute': '1' } });
    t.like(decisions[1], { kind: 'continue', responseHeaders: { 'X-RateLimit-Remaining-minute': '0' } });
    t.like(decisions[2], { kind: 'respond', status: 429 });
    t.like(await limiter.core.access(request('192.0.2.42')), { kind: 'continue' }, 'another address has its own count');
  });
}

test('a global limiter keeps the configured rewrite phase: its access phase does not count the address again', async (t) => {
  const { chains, rewriteChain, close } = await buildChains(deckWith('global'), deps());
  t.teardown(close);
  const [global] = rewriteChain;
  t.is(global?.name, 'tiered-rate-limit');
  const [route] = [...chains.keys()] as [DeckRoute];
  t.is(chains.get(route)!.find((e) => e.name === 'tiered-rate-limit')!.entry, global, 'the same instance takes both phases');
  t.like(await global!.core.rewrite!(request('192.0.2.43')), { kind: 'continue', responseHeaders: { 'X-RateLimit-Remaining-minute': '1' } });
  for (let i = 0; i < 3; i++) t.like(await global!.core.access(request('192.0.2.43')), { kind: 'continue' }, 'no address count in the access phase');
  t.like(await global!.core.rewrite!(request('192.0.2.43')), { kind: 'continue', responseHeaders: { 'X-RateLimit-Remaining-minute': '0' } });
});
