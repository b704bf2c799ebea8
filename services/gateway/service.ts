import { existsSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type Express } from 'express';
import { loadCatalogConfig, STREAMS_PER_HTTP2_CONNECTION } from '../../domains/catalog/index.js';
import { acceptRequestId, accessLogger, adoptRequestObjects, errorBody, metricsPage, startsWithAny, type ProcessRuntime } from '../kit/index.js';
import type { ServiceContext, ServiceDefinition } from '../kit/index.js';
import { edgeConfigShape, loadEdgeConfig } from './config.js';
import { deckVariables } from './deck-vars.js';
import { trustedPeers } from './client-ip.js';
import { connectionsForOpenFileLimit, guardConnections } from './connections.js';
import { loadDeck } from './deck.js';
import { createEdge } from './edge.js';
import { createEdgeMetrics } from './metrics.js';
import { sendJson } from './proxy.js';

/**
 * Sockets a chat request in flight holds in the edge's process, which `EDGE_MAX_CONNECTIONS=auto`
 * divides the open-file limit by: its client's, and either the hop to llm-api or, when llm-api runs
 * in this process and is reached in process, its provider connection, which under HTTP/2 it shares
 * with up to STREAMS_PER_HTTP2_CONNECTION others.
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

/**
 * The embedded edge (`npm start`, tests): reads deck/kong.yaml — the file Kong is configured
 * from — and runs the same plugin cores. Started after the services, so ctx.urls holds their
 * real ports. Listens on GATEWAY_PORT (8000). It keeps no state: started alone, it opens no
 * database and no bus (rate-limit counters live in Redis or in the process).
 */
export const gatewayService: ServiceDefinition<ProcessRuntime> = {
  name: 'gateway',
  port: (config) => config.GATEWAY_PORT,
  config: edgeConfigShape,
  migrations: [],
  stateless: true,
  async createApp(ctx) {
    const config = { ...ctx.runtime.config, ...loadEdgeConfig(ctx.runtime.config.env) };
    const deck = loadDeck(deckPath(config.EDGE_DECK_FILE), deckVariables(config, ctx.urls, ctx.gatewaySecret));
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
    const app = express();
    app.disable('x-powered-by');
    app.disable('etag');
    // The edge's own metrics (Kong: the status listener), answered before any route or limit.
    if (config.METRICS_ENABLED) {
      app.get('/metrics', async (_req, res) => {
        res.setHeader('content-type', metrics.registry.contentType);
        res.end(await metricsPage('gateway', metrics.registry));
      });
      app.all('/metrics', (req, res) => {
        const requestId = acceptRequestId(req.get('x-request-id'));
        sendJson(res, 405, errorBody(405, `${req.method} is not allowed on /metrics; allowed: GET, HEAD`, { requestId }), { allow: 'GET, HEAD', 'x-request-id': requestId });
      });
    }
    app.use((req, res) => edge.handle(req, res));
    app.locals.edgeMetrics = metrics;
    directToEdge(app, edge.handle);
    adoptRequestObjects(app);
    return app;
  },
  onListening(server, ctx) {
    const config = { ...ctx.runtime.config, ...loadEdgeConfig(ctx.runtime.config.env) };
    // The server's request listener is the app built above.
    const app = server.listeners('request')[0] as unknown as Express;
    const metrics = app.locals?.edgeMetrics as ReturnType<typeof createEdgeMetrics> | undefined;
    const maxOpen = config.EDGE_MAX_CONNECTIONS === 'auto' ? connectionsForOpenFileLimit(undefined, socketsPerChatRequest(config, ctx)) : config.EDGE_MAX_CONNECTIONS || undefined;
    const guard = guardConnections(server, {
      maxOpen,
      maxPerAddress: config.EDGE_MAX_CONNECTIONS_PER_ADDRESS,
      maxIdlePerAddress: config.EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS,
      ipv6PrefixLength: config.EDGE_RATE_LIMIT_IPV6_PREFIX,
      isTrusted: trustedPeers(config.TRUSTED_PROXIES).isTrusted,
      firstRequestTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
      onRefused: () => metrics?.connectionRefused(),
      onOverCapacity: () => metrics?.connectionOverCapacity(),
    });
    metrics?.watchConnections(() => guard.open, maxOpen);
  },
};

/**
 * Requests that none of the app's own routes could match go to the edge without Express's router,
 * which cost every proxied request a prototype change of its req and res, a path match per layer
 * and a closure per step (a twentieth of the memory a chat request allocates). Only while the app
 * is routes with plain paths followed by the edge; anything else added to it (a middleware) turns
 * this off, so every request takes Express's way again. A path that starts like one of the routes
 * (any case, any suffix) or is not origin-form takes Express's way too.
 */
function directToEdge(app: Express, handle: (req: IncomingMessage, res: ServerResponse) => void): void {
  const layers = (app as unknown as { router: { stack: Array<{ route?: { path?: unknown } }> } }).router.stack;
  const own = layers.slice(0, -1);
  if (!own.every((layer) => typeof layer.route?.path === 'string')) return;
  const prefixes = own.map((layer) => (layer.route!.path as string).toLowerCase());
  const dispatcher = app as unknown as { handle: (this: Express, req: IncomingMessage, res: ServerResponse, callback?: unknown) => void };
  const viaExpress = dispatcher.handle;
  dispatcher.handle = function handleRequest(req, res, callback) {
    const url = req.url ?? '';
    if (callback === undefined && url.charCodeAt(0) === 47 /* / */) {
      const path = url.toLowerCase();
      if (!startsWithAny(path, prefixes)) return handle(req, res);
    }
    return viaExpress.call(this, req, res, callback);
  };
}
