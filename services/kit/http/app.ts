import express, { type Express, type Router } from 'express';
import type { Logger } from '../logger.js';
import { identity, requireGatewayToken } from '../identity/middleware.js';
import type { UserDirectory } from '../identity/directory.js';
import { bodyReader, type BodyRule } from './body.js';
import { errorHandler, unknownRoute } from './errors.js';
import { createMetrics } from './metrics.js';
import { requestContext } from './request-context.js';

/**
 * The app factory every service builds on. The whole request path, top to bottom:
 * request id + access log → metrics → probes → gateway token → identity → body → routes → 404 → errors.
 */
export interface ServiceAppOptions {
  name: string;
  logger: Logger;
  /** Required for every non-probe request when set (always set outside unit tests). */
  gatewaySecret?: string;
  users: UserDirectory;
  /** Paths reachable without identity headers (still behind the gateway token). */
  publicPaths?: RegExp[];
  /** Readiness checks by name (database, bus…); each throws when its dependency is down. */
  readiness?: Record<string, () => Promise<void>>;
  bodyLimit: number;
  bodyRules?: BodyRule[];
  metrics?: boolean;
  /** Mounts the service's resources. */
  routes: (router: Router) => void;
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

  const metrics = createMetrics(options.name);
  const publicPaths = options.publicPaths ?? [];

  app.use(requestContext(options.logger));
  if (options.metrics !== false) app.use(metrics.middleware);

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
  app.use(identity(options.users, (path) => publicPaths.some((re) => re.test(path))));
  app.use(bodyReader({ defaultLimit: options.bodyLimit, rules: options.bodyRules }));

  const router = express.Router();
  options.routes(router);
  app.use(router);

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
