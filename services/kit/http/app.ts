import express, { type Express } from 'express';
import type { Logger } from '../logger.js';
import { requireGatewayToken } from '../identity/middleware.js';
import type { UserDirectory } from '../identity/directory.js';
import { errorHandler, unknownRoute } from './errors.js';
import { createMetrics } from './metrics.js';
import { registerDataMetrics } from '../data-metrics.js';
import { mountRoutes } from './mount.js';
import { requestContext } from './request-context.js';
import { servedRequests, type ServedRequest } from './served.js';
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
  readiness?: Record<string, () => Promise<void>>;
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

  app.use(requestContext(options.logger));
  if (options.metrics !== false) app.use(metrics.middleware);
  if (options.onRequestEnd) app.use(servedRequests(options.onRequestEnd, options.now ?? Date.now, (path) => PROBES.test(path)));

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok', service: options.name });
  });
  app.get('/readyz', async (_req, res) => {
    const checks: Record<string, string> = {};
    let ready = true;
    await Promise.all(
      Object.entries(options.readiness ?? {}).map(async ([name, check]) => {
        try {
          await withTimeout(check(), 2000);
          checks[name] = 'ok';
        } catch (error) {
          ready = false;
          checks[name] = 'unavailable';
          options.logger.warn({ check: name, err: (error as Error).message }, 'readiness check failed');
        }
      }),
    );
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', service: options.name, checks });
  });
  if (options.metrics !== false) app.get('/metrics', metrics.endpoint);

  if (options.gatewaySecret) app.use(requireGatewayToken(options.gatewaySecret, (path) => PROBES.test(path) || WELL_KNOWN.test(path)));
  if (options.routeTable) {
    app.use(mountRoutes(options.routeTable, { users: options.users, bodyLimit: options.bodyLimit, jsonMaxDepth: options.jsonMaxDepth, aliases: options.aliases }));
  }

  app.use(unknownRoute);
  app.use(errorHandler(options.logger));
  return app;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
