import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEdge } from '../../services/gateway/edge.js';
import type { ReadinessChecks } from '../../services/kit/core/index.js';
import { silentLogger, type PluginLogger } from '../../plugins/core/index.js';
import type { Clock } from '../../services/kit/clock.js';
import { createInProcessRevocations, type RevocationChannel } from '../../services/kit/revocations.js';
import { AUDIENCE, ISSUER, startFakeIssuer, startFakeUpstream, startFakeValidator } from '../plugins/fakes.js';
import { loadTestDeck } from './deck-fixture.js';

export const GATEWAY_TOKEN = 'gw-'.padEnd(40, 'z');

/**
 * The embedded edge on the real deck/kong.yaml, with every upstream, the JWKS and the key
 * validator replaced by real local fakes, on a free port. `deck` is the rendered file, for a test
 * that configures another host (Kong's plugin servers) from the same deck.
 */
export async function startEdgeWithFakes(options: {
  vars?: Record<string, string>;
  clock: Clock;
  revocations?: RevocationChannel;
  trustedProxies?: string[];
  readiness?: ReadinessChecks;
  /** Where the edge logs (silent unless given). */
  logger?: PluginLogger;
}) {
  const issuer = await startFakeIssuer();
  const validator = await startFakeValidator(GATEWAY_TOKEN);
  const upstream = await startFakeUpstream();
  const revocations = options.revocations ?? createInProcessRevocations();
  const deck = loadTestDeck({
    DECK_LLM_API_URL: upstream.url,
    DECK_RESPONSE_API_URL: upstream.url,
    DECK_MEDIA_API_URL: upstream.url,
    DECK_MCP_TOOLS_URL: upstream.url,
    DECK_GATEWAY_SHARED_SECRET: GATEWAY_TOKEN,
    DECK_JWT_ISSUER: ISSUER,
    DECK_JWT_AUDIENCE: AUDIENCE,
    DECK_JWKS_URL: issuer.url,
    DECK_API_KEY_VALIDATE_URL: validator.url,
    DECK_API_KEY_TIMEOUT_MS: '1000',
    ...options.vars,
  });
  const edge = await createEdge({
    deck,
    deps: { clock: options.clock, logger: options.logger ?? silentLogger, revocations },
    trustedProxies: options.trustedProxies ?? [],
    connectTimeoutMs: 1000,
    readTimeoutMs: 5000,
    readiness: options.readiness,
  });
  const server: Server = createServer((req, res) => edge.handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    issuer,
    validator,
    upstream,
    revocations,
    deck,
    edge,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await edge.close();
      await Promise.all([issuer.close(), validator.close(), upstream.close()]);
    },
  };
}
