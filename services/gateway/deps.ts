import { existsSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCatalogConfig, STREAMS_PER_HTTP2_CONNECTION } from '../../domains/catalog/index.js';
import { accessLogger, type ProcessRuntime, type ServiceContext } from '../kit/index.js';
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
