import express, { type ErrorRequestHandler, type Express, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from '../logger.js';
import { checkReadiness, type ReadinessChecks } from '../readiness.js';
import { requireGatewayToken } from '../identity/middleware.js';
import type { UserDirectory } from '../identity/directory.js';
import { errorHandler, unknownRoute } from './errors.js';
import { createMetrics } from './metrics.js';
import { registerDataMetrics } from '../data-metrics.js';
import { EXACT_ROUTES, mountRoutes } from './mount.js';
import { requestContext } from './request-context.js';
import { servedRequests, type ServedRequest } from './served.js';
import { adoptRequestObjects } from './request-objects.js';
import type { Route } from './route-table.js';

/**
 * The app factory every service builds on. The whole request path, top to bottom:
 * request id + access log → metrics → probes → gateway token → route table (per route: access → body →
 * validation → handler) → 404 → errors.
 */
export interface ServiceAppOptions {
  name: string;
  logger: Logger;
  /** Required for every non-probe request when set (always set outside unit tests). */
  gatewaySecret?: string;
  users: UserDirectory;
  /** The service's routes as data (`routes(deps)` of each resource), mounted by `mountRoutes`. */
  routeTable?: readonly Route[];
  /** Prefixes under which every route of the table is reachable too (llm-api: `['/llm']`). */
  aliases?: string[];
  /** Readiness checks by name (database, bus…); each throws when its dependency is down. */
  readiness?: ReadinessChecks;
  /** Body limit of routes that declare none. */
  bodyLimit: number;
  /** `JSON_MAX_DEPTH`: deepest nesting accepted in a JSON body (default 64). */
  jsonMaxDepth?: number;
  metrics?: boolean;
  /** The service's own prom-client registry; its series are served on /metrics with the HTTP ones. */
  metricsRegistry?: import('prom-client').Registry;
  /** The shared state whose backlog /metrics reports (outbox, bus queues); absent for a stateless app. */
  dataMetrics?: Parameters<typeof registerDataMetrics>[1];
  /** Called once per finished request (probes excluded), e.g. to keep a request log off the request path. */
  onRequestEnd?: (served: ServedRequest) => void;
  /** Time source of `onRequestEnd`'s `ended_at` (the runtime's clock). */
  now?: () => number;
}

const PROBES = /^\/(healthz|readyz|metrics)$/;
/**
 * Well-known documents (RFC 8615: JWKS, OpenID discovery) are public by definition; token verifiers
 * (the edge, Kong, other services) fetch them without the gateway token.
 */
const WELL_KNOWN = /^(\/llm)?\/\.well-known\//;

export function createServiceApp(options: ServiceAppOptions): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', false);
  app.set('query parser', 'extended');

  const metrics = createMetrics(options.name, { registry: options.metricsRegistry });
  if (options.dataMetrics && options.metrics !== false) registerDataMetrics(metrics.registry, options.dataMetrics);

  // The app-level middlewares every route-table request passes, in order (also run by `directDispatch`).
  const before: RequestHandler[] = [];
  const use = (middleware: RequestHandler) => {
    before.push(middleware);
    app.use(middleware);
  };
  use(requestContext(options.logger));
  if (options.metrics !== false) use(metrics.middleware);
  if (options.onRequestEnd) use(servedRequests(options.onRequestEnd, options.now ?? Date.now, (path) => PROBES.test(path)));

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok', service: options.name });
  });
  app.get('/readyz', async (_req, res) => {
    const { ready, checks } = await checkReadiness(options.readiness ?? {}, options.logger);
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', service: options.name, checks });
  });
  if (options.metrics !== false) app.get('/metrics', metrics.endpoint);

  if (options.gatewaySecret) use(requireGatewayToken(options.gatewaySecret, (path) => PROBES.test(path) || WELL_KNOWN.test(path)));
  let exact: Map<string, RequestHandler> | undefined;
  if (options.routeTable) {
    const router = mountRoutes(options.routeTable, { users: options.users, bodyLimit: options.bodyLimit, jsonMaxDepth: options.jsonMaxDepth, aliases: options.aliases });
    exact = (router as unknown as Record<symbol, Map<string, RequestHandler>>)[EXACT_ROUTES];
    app.use(router);
  }

  app.use(unknownRoute);
  const onError = errorHandler(options.logger);
  app.use(onError);
  if (exact && exact.size > 0) directDispatch(app, before, exact, onError);
  // Outermost: every request, direct or through Express, is given this app's `req.app`/`res.app` first.
  adoptRequestObjects(app);
  return app;
}

/**
 * Requests for a parameter-free path of the route table skip Express's router: it tried every
 * app-level layer and then every layer of the table in turn (a path match, parameter processing and
 * a closure each) before reaching the entry. Such a request gets what Express gives it (Express's
 * request and response prototypes, `res.locals`, `req.originalUrl`, `req.baseUrl`, empty
 * `req.params`), then the same app-level middlewares in the same order, then the entry's own handler;
 * anything passed to `next` with an error goes to the app's error handler, as it would through
 * Express. Every other request (probes, HEAD, OPTIONS, parameters, unknown paths, an app mounted
 * inside another) takes Express's way, unchanged.
 */
function directDispatch(app: Express, before: RequestHandler[], exact: Map<string, RequestHandler>, onError: ErrorRequestHandler): void {
  type Handle = (this: Express, req: Request, res: Response, callback?: (error?: unknown) => void) => void;
  const dispatcher = app as unknown as { handle: Handle };
  const viaExpress = dispatcher.handle;
  dispatcher.handle = function handle(req, res, callback) {
    const url = req.url;
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const handler = callback === undefined && !PROBES.test(path) ? exact.get(`${req.method} ${path}`) : undefined;
    if (handler === undefined) return viaExpress.call(this, req, res, callback);

    if (this.enabled('x-powered-by')) res.setHeader('X-Powered-By', 'Express');
    req.res = res;
    res.req = req;
    Object.setPrototypeOf(req, this.request);
    Object.setPrototypeOf(res, this.response);
    if (!res.locals) res.locals = Object.create(null);
    req.baseUrl = '';
    req.originalUrl = req.originalUrl || url;
    req.params = {};

    const fail = (error: unknown) => {
      try {
        onError(error, req, res, () => undefined);
      } catch {
        // The error handler itself failed: nothing can be said to the client any more.
        res.destroy();
      }
    };
    let index = 0;
    const next = (error?: unknown): void => {
      if (error) return fail(error);
      try {
        const middleware = index < before.length ? before[index++] : index++ === before.length ? handler : unknownRoute;
        const result: unknown = middleware(req, res, next);
        if (result instanceof Promise) result.then(undefined, next);
      } catch (thrown) {
        next(thrown ?? new Error('a middleware threw without an error'));
      }
    };
    req.next = next;
    next();
  };
}

