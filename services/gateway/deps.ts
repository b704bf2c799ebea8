import { existsSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCatalogConfig, STREAMS_PER_HTTP2_CONNECTION } from '../../domains/catalog/index.js';
import { accessLogger, serverAddress, serverFailure, type ProcessRuntime, type ServiceContext } from '../kit/index.js';
import { loadEdgeConfig, type EdgeConfig } from './config.js';
import { deckVariables } from './deck-vars.js';
import { loadDeck } from './deck.js';
import { createEdge, type Edge } from './edge.js';
import { createEdgeMetrics, type EdgeMetrics } from './metrics.js';

/** The composition root of the embedded edge: settings parsed once, the deck and the edge built once. */
export interface GatewayDeps {
  config: ProcessRuntime['config'] & EdgeConfig;
  edge: Edge;
  metrics: EdgeMetrics;
  /** Sockets a chat request in flight holds in this process (`EDGE_MAX_CONNECTIONS=auto` divides by it). */
  socketsPerChatRequest: number;
}

export async function buildGatewayDeps(ctx: ServiceContext<ProcessRuntime>): Promise<GatewayDeps> {
  const config = { ...ctx.runtime.config, ...loadEdgeConfig(ctx.runtime.config.env) };
  const variables = deckVariables(config, ctx.urls, ctx.gatewaySecret);
  const deck = loadDeck(deckPath(config.EDGE_DECK_FILE), variables);
  if (config.REDIS_URL) await checkRedisAnswers(config.REDIS_URL, REDIS_START_TIMEOUT_MS);
  if (config.NODE_ENV === 'production' && variables.DECK_RATE_LIMIT_FAULT_POLICY === 'allow') {
    // Chosen knowingly or not, fail-open is worth a line at every start (the default is deny).
    ctx.runtime.logger.warn({ setting: 'EDGE_RATE_LIMIT_FAULT_POLICY', value: 'allow' }, 'gateway: while Redis fails, requests are served with no rate limit at all');
  }
  const metrics = createEdgeMetrics();
  const access = accessLogger(ctx.runtime.logger);
  const edge = await createEdge({
    deck,
    deps: { clock: ctx.runtime.clock, logger: ctx.runtime.logger, revocations: ctx.runtime.revocations },
    trustedProxies: config.TRUSTED_PROXIES,
    connectTimeoutMs: config.EDGE_UPSTREAM_CONNECT_TIMEOUT_MS,
    readTimeoutMs: config.EDGE_UPSTREAM_READ_TIMEOUT_MS,
    writeTimeoutMs: config.EDGE_UPSTREAM_WRITE_TIMEOUT_MS,
    inProcess: config.EDGE_IN_PROCESS_DISPATCH ? (origin) => ctx.inProcess?.get(origin) : undefined,
    // Read per probe: the process adds `shutdown` to it when the drain starts (SIGTERM).
    readiness: ctx.runtime.readiness,
    accessLog: (entry) => {
      metrics.observe(entry.route, entry.status, entry.duration_ms);
      if (entry.status >= 500) access.error(entry, 'edge request');
      else access.info(entry, 'edge request');
    },
  });
  ctx.onStop(() => edge.close());
  ctx.runtime.logger.info({ routes: edge.router.size }, 'gateway: decK configuration loaded');
  return { config, edge, metrics, socketsPerChatRequest: socketsPerChatRequest(config, ctx) };
}

/**
 * Its client's socket, and either the hop to llm-api or, when llm-api runs in this process and is
 * reached in process, its provider connection, which under HTTP/2 it shares with up to
 * STREAMS_PER_HTTP2_CONNECTION others.
 */
function socketsPerChatRequest(config: { EDGE_IN_PROCESS_DISPATCH: boolean; env: NodeJS.ProcessEnv }, ctx: ServiceContext<ProcessRuntime>): number {
  const chatInProcess = config.EDGE_IN_PROCESS_DISPATCH && ctx.inProcess?.has(ctx.urls.llmApi) === true;
  if (!chatInProcess || loadCatalogConfig(config.env).LLM_UPSTREAM_HTTP_VERSION !== '2') return 2;
  return 1 + 1 / STREAMS_PER_HTTP2_CONNECTION;
}

/** A relative EDGE_DECK_FILE: from the working directory, else from the repository root (npm start elsewhere). */
function deckPath(file: string): string {
  if (isAbsolute(file) || existsSync(resolve(file))) return resolve(file);
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, file);
}

/** How long the edge's start waits for REDIS_URL to answer a PING. */
export const REDIS_START_TIMEOUT_MS = 10_000;

/**
 * REDIS_URL, when set, must answer before the edge builds its plugin chain: its rate limiter counts
 * there and its caches hear revocations there. Without this, a Redis that refuses surfaced as the
 * rate limiter's `deck:` error after its retries, and one that accepts but never answers held the
 * start forever. What is thrown carries the socket error's `code` and the URL's address and port, so
 * the start ends with one line naming REDIS_URL (services/platform/startup-errors.ts); credentials
 * the server refuses (any error answer to the URL's AUTH, or NOAUTH to the PING) throw code `EAUTH`
 * with the answer's first word as `reply`. It always throws: the edge never serves without its limiter.
 */
export async function checkRedisAnswers(url: string, timeoutMs: number): Promise<void> {
  const { Redis } = await import('ioredis');
  const target = new URL(url);
  const where = serverAddress(target, 6379);
  // The credentials go in an AUTH of our own: ioredis answers a refused AUTH with a console warning
  // (a server without a password) and carries on, so a wrong password would pass here unnoticed.
  const username = decodeURIComponent(target.username);
  const password = decodeURIComponent(target.password);
  target.username = '';
  target.password = '';
  const refused = (error: Error) => serverFailure(where, 'EAUTH', 'auth', ` (${replyCode(error)})`, replyCode(error));
  // One attempt, no queue, no reconnect: the answer is now or never. RESP2 and no ready check: a
  // HELLO or an INFO would meet a password-protected server's NOAUTH before our AUTH is sent.
  const client = new Redis(target.toString(), { lazyConnect: true, protocol: 2, connectTimeout: timeoutMs, maxRetriesPerRequest: 0, enableOfflineQueue: false, enableReadyCheck: false, retryStrategy: () => null });
  let socketError: (Error & { code?: string; address?: string; port?: number }) | undefined;
  client.on('error', (error: Error) => (socketError ??= error));
  let timer: NodeJS.Timeout | undefined;
  // ioredis bounds the TCP connect only: a server that accepts and never answers would hold the start.
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(serverFailure(where, 'ETIMEDOUT', 'connect', ` (no answer within ${timeoutMs} ms)`)), timeoutMs);
  });
  try {
    const answers = async () => {
      await client.connect();
      // Any error answer to AUTH is a refusal: a wrong password (WRONGPASS), or a password given
      // to a server that has none (ERR … called without any password configured).
      if (password) await (username ? client.auth(username, password) : client.auth(password)).catch((error: Error) => {
        throw isReplyError(error) ? refused(error) : error;
      });
      await client.ping().catch((error: Error) => {
        throw isReplyError(error) && /^(NOAUTH|WRONGPASS|NOPERM)\b/.test(error.message) ? refused(error) : error;
      });
    };
    await Promise.race([answers(), deadline]);
  } catch (error) {
    // A reset or a broken pipe does not say where: the URL's address and port do.
    if (socketError?.code) throw Object.assign(socketError, { address: socketError.address ?? where.address, port: socketError.port ?? where.port });
    if ((error as { code?: string }).code === 'ETIMEDOUT' || (error as { code?: string }).code === 'EAUTH') throw error;
    // Closed without a socket error (the server hung up on the handshake), or a Redis error answer.
    if ((error as Error).message === 'Connection is closed.') throw serverFailure(where, 'ECONNRESET', 'connect', ' (closed by the server)');
    throw error;
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/** A Redis error answer (ioredis's ReplyError), as opposed to a socket failure. */
function isReplyError(error: Error): boolean {
  return error?.name === 'ReplyError';
}

/** The first word of a Redis error answer (WRONGPASS, NOAUTH, ERR): never the rest, which may echo input. */
function replyCode(error: Error): string {
  return /^[A-Z]+/.exec(error.message)?.[0] ?? 'ERR';
}
