import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type Express } from 'express';
import { acceptRequestId, adoptRequestObjects, ConfigError, errorBody, listen, metricsPage, serverTimeouts, startsWithAny, trustedPeers, type ProcessRuntime } from '../kit/index.js';
import type { ServiceContext, ServiceDefinition } from '../kit/index.js';
import { edgeConfigShape } from './config.js';
import { connectionsForOpenFileLimit, guardConnections } from './connections.js';
import { buildGatewayDeps, type GatewayDeps } from './deps.js';
import { sendJson } from './proxy.js';

/** What createApp built, for onListening, which is handed the server its app listens on. */
const depsOfApp = new WeakMap<Express, GatewayDeps>();
/** The address of each started edge's metrics listener, by its service context. */
const metricsUrls = new WeakMap<object, string>();

/** Where a started edge serves its metrics (`http://host:port`); undefined with METRICS_ENABLED off. */
export function edgeMetricsUrl(ctx: ServiceContext<any>): string | undefined {
  return metricsUrls.get(ctx);
}

/**
 * The embedded edge (`npm start`, tests): reads deck/kong.yaml — the file Kong is configured
 * from — and runs the same plugin cores. Started after the services, so ctx.urls holds their
 * real ports. Listens on GATEWAY_PORT (8000), and serves its metrics on a listener of its own
 * (EDGE_METRICS_HOST:EDGE_METRICS_PORT, loopback by default). It keeps no state: started alone, it
 * opens no database and no bus (rate-limit counters live in Redis or in the process).
 */
export const gatewayService: ServiceDefinition<ProcessRuntime> = {
  name: 'gateway',
  port: (config) => config.GATEWAY_PORT,
  config: edgeConfigShape,
  migrations: [],
  stateless: true,
  async createApp(ctx) {
    const deps = await buildGatewayDeps(ctx);
    const { edge, metrics } = deps;
    const app = express();
    app.disable('x-powered-by');
    app.disable('etag');
    // The edge's own metrics are not on the public port (where `/metrics` is a path like any other,
    // routed by the deck): a scrape costs the series of every copy of the platform, and says how
    // the platform is used. Kong serves them on its status listener; this is that listener.
    if (deps.config.METRICS_ENABLED) {
      const { config } = deps;
      const port = metricsPort(config.EDGE_METRICS_PORT, config.GATEWAY_PORT);
      const listener = await listen(metricsApp(metrics), { host: config.EDGE_METRICS_HOST, port, timeouts: serverTimeouts(config) }).catch((error: NodeJS.ErrnoException) => {
        // The start's one line names the setting to change, as for the public port.
        if (error.code !== 'EADDRINUSE' && error.code !== 'EACCES' && error.code !== 'EADDRNOTAVAIL') throw error;
        throw new ConfigError('EDGE_METRICS_PORT', `cannot listen on ${config.EDGE_METRICS_HOST}:${port} for the edge's metrics (${error.code}); stop the other process or set EDGE_METRICS_PORT / EDGE_METRICS_HOST`);
      });
      ctx.onStop(() => listener.close(1_000));
      const host = config.EDGE_METRICS_HOST.includes(':') ? `[${config.EDGE_METRICS_HOST}]` : config.EDGE_METRICS_HOST;
      metricsUrls.set(ctx, `http://${host}:${listener.port}`);
      ctx.runtime.logger.info({ host: config.EDGE_METRICS_HOST, port: listener.port }, 'gateway: metrics listening');
    }
    app.use((req, res) => edge.handle(req, res));
    depsOfApp.set(app, deps);
    directToEdge(app, edge.handle);
    adoptRequestObjects(app);
    return app;
  },
  onListening(server, _ctx, app) {
    const deps = depsOfApp.get(app);
    if (!deps) throw new Error('gateway: onListening was handed an app createApp did not build');
    const { config, metrics } = deps;
    const maxOpen = config.EDGE_MAX_CONNECTIONS === 'auto' ? connectionsForOpenFileLimit(undefined, deps.socketsPerChatRequest) : config.EDGE_MAX_CONNECTIONS || undefined;
    const guard = guardConnections(server, {
      maxOpen,
      maxPerAddress: config.EDGE_MAX_CONNECTIONS_PER_ADDRESS,
      maxIdlePerAddress: config.EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS,
      ipv6PrefixLength: config.EDGE_RATE_LIMIT_IPV6_PREFIX,
      isTrusted: trustedPeers(config.TRUSTED_PROXIES).isTrusted,
      firstRequestTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
      onRefused: () => metrics.connectionRefused(),
      onOverCapacity: () => metrics.connectionOverCapacity(),
    });
    metrics.watchConnections(() => guard.open, maxOpen);
  },
};

/** EDGE_METRICS_PORT, or Kong's offset from the proxy port to its status port (8000 → 8100); with GATEWAY_PORT 0, any free port. */
export function metricsPort(configured: number | undefined, gatewayPort: number): number {
  if (configured !== undefined) return configured;
  if (gatewayPort === 0) return 0;
  if (gatewayPort + 100 > 65535) throw new ConfigError('EDGE_METRICS_PORT', `unset, it is GATEWAY_PORT + 100 (${gatewayPort + 100}), which is not a port; set it`);
  return gatewayPort + 100;
}

/** The metrics listener's app: `GET /metrics` (HEAD too), 405 for other methods there, 404 elsewhere. */
function metricsApp(metrics: GatewayDeps['metrics']): Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.get('/metrics', async (_req, res) => {
    res.setHeader('content-type', metrics.registry.contentType);
    res.end(await metricsPage('gateway', metrics.registry));
  });
  app.all('/metrics', (req, res) => {
    const requestId = acceptRequestId(req.get('x-request-id'));
    sendJson(res, 405, errorBody(405, `${req.method} is not allowed on /metrics; allowed: GET, HEAD`, { requestId }), { allow: 'GET, HEAD', 'x-request-id': requestId });
  });
  app.use((req, res) => {
    const requestId = acceptRequestId(req.get('x-request-id'));
    sendJson(res, 404, errorBody(404, 'Only /metrics is served here', { requestId }), { 'x-request-id': requestId });
  });
  return app;
}

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

/** What a failed deck load throws (the platform names it in its one-line start failure). */
export { DeckError } from './deck.js';
/** The edge's settings, for the platform's checks of settings that must agree across parts. */
export { loadEdgeConfig } from './config.js';
export { deckOverrides } from './deck-vars.js';
