import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type Express } from 'express';
import { acceptRequestId, adoptRequestObjects, errorBody, metricsPage, startsWithAny, trustedPeers, type ProcessRuntime } from '../kit/index.js';
import type { ServiceDefinition } from '../kit/index.js';
import { edgeConfigShape } from './config.js';
import { connectionsForOpenFileLimit, guardConnections } from './connections.js';
import { buildGatewayDeps, type GatewayDeps } from './deps.js';
import { sendJson } from './proxy.js';

/** What createApp built, for onListening, which is handed the server its app listens on. */
const depsOfApp = new WeakMap<Express, GatewayDeps>();

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
    const deps = await buildGatewayDeps(ctx);
    const { edge, metrics } = deps;
    const app = express();
    app.disable('x-powered-by');
    app.disable('etag');
    // The edge's own metrics (Kong: the status listener), answered before any route or limit.
    if (deps.config.METRICS_ENABLED) {
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
