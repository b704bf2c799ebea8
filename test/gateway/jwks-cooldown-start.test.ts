import test from 'ava';
import { buildChains } from '../../services/gateway/chain.js';
import { loadEdgeConfig } from '../../services/gateway/config.js';
import { DeckError } from '../../services/gateway/deck.js';
import { createInProcessRevocations } from '../../services/kit/core/index.js';
import { loadTestDeck } from './deck-fixture.js';

// A JWKS refresh cool-down of 0 would let every token with an unknown `kid` fetch the JWKS: one
// fetch per request. The embedded edge refuses to start on such a deck (DECK_JWKS_REFRESH_COOLDOWN_SECONDS,
// which EDGE_JWKS_REFRESH_COOLDOWN_SECONDS feeds), naming the plugin field, as Kong refuses the sync.
const deps = () => ({ clock: { now: () => 0 }, logger: { warn() {}, error() {} }, revocations: createInProcessRevocations() });

test('the embedded edge refuses to start with a JWKS refresh cool-down of 0, and starts with 1', async (t) => {
  await t.throwsAsync(buildChains(loadTestDeck({ DECK_JWKS_REFRESH_COOLDOWN_SECONDS: '0' }), deps()), {
    instanceOf: DeckError,
    message: /jwt-auth.*config\.jwks_refresh_cooldown_seconds/,
  });
  const started = await buildChains(loadTestDeck({ DECK_JWKS_REFRESH_COOLDOWN_SECONDS: '1' }), deps());
  t.teardown(() => started.close());
  t.true(started.chains.size > 0);
});

test('EDGE_JWKS_REFRESH_COOLDOWN_SECONDS of 0 is refused when the settings are read, naming the setting', (t) => {
  t.throws(() => loadEdgeConfig({ EDGE_JWKS_REFRESH_COOLDOWN_SECONDS: '0' }), { message: /EDGE_JWKS_REFRESH_COOLDOWN_SECONDS/ });
  t.is(loadEdgeConfig({ EDGE_JWKS_REFRESH_COOLDOWN_SECONDS: '1' }).EDGE_JWKS_REFRESH_COOLDOWN_SECONDS, 1);
});
