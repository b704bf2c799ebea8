/**
 * One embedded-gateway process on deck/kong.yaml, configured entirely by environment, for tests
 * and benchmarks that need several edge nodes (shared Redis counters, revocations):
 *   EDGE_PROCESS_VARS      JSON object of DECK_* variables (upstreams, validator, limits, Redis)
 *   EDGE_PROCESS_REDIS_URL revocation channel over Redis (else in-process), named by DECK_REDIS_PREFIX
 *   EDGE_PROCESS_CLOCK_OFFSET_MS  clock offset (tests align windows without waiting)
 *   EDGE_PROCESS_TRUSTED_PROXIES  comma list
 * Prints one JSON line {"port": N} on stdout when listening; stops on SIGTERM.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { loadDeck } from '../../services/gateway/deck.js';
import { createEdge } from '../../services/gateway/edge.js';
import { offsetClock } from '../../services/kit/clock.js';
import { createRedisRevocations } from '../../services/kit/revocations-redis.js';
import { createInProcessRevocations, DEFAULT_REDIS_PREFIX, revocationChannelFor } from '../../services/kit/revocations.js';

const vars = JSON.parse(process.env.EDGE_PROCESS_VARS ?? '{}') as Record<string, string>;
const redisUrl = process.env.EDGE_PROCESS_REDIS_URL;
// The channel of the deck's Redis prefix, as Kong's api-key-auth derives it from its redis_prefix.
const channel = revocationChannelFor(vars.DECK_REDIS_PREFIX ?? DEFAULT_REDIS_PREFIX);
const revocations = redisUrl ? createRedisRevocations(redisUrl, { channel }) : createInProcessRevocations();
const edge = await createEdge({
  deck: loadDeck(resolve(process.env.EDGE_PROCESS_DECK ?? 'deck/kong.yaml'), vars),
  deps: {
    clock: offsetClock(Number(process.env.EDGE_PROCESS_CLOCK_OFFSET_MS ?? 0)),
    logger: { warn: (f, m) => process.stderr.write(`${m} ${JSON.stringify(f)}\n`), error: (f, m) => process.stderr.write(`${m} ${JSON.stringify(f)}\n`) },
    revocations,
  },
  trustedProxies: (process.env.EDGE_PROCESS_TRUSTED_PROXIES ?? '').split(',').filter(Boolean),
  connectTimeoutMs: 5000,
  readTimeoutMs: 300000,
});
const server = createServer((req, res) => edge.handle(req, res));
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.once('SIGTERM', () => {
  server.closeAllConnections();
  server.close();
  void edge.close().then(() => revocations.close()).finally(() => process.exit(0));
});
