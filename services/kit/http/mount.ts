import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import { CancelToken } from '../cancel.js';
import { ApiError, ClientClosed } from '../errors.js';
import { isPending, type MaybePromise } from '../maybe-async.js';
import type { UserDirectory } from '../identity/directory.js';
import { hasIdentityHeaders, resolvePrincipal } from '../identity/middleware.js';
import type { Principal } from '../identity/principal.js';
import { parseBody, parseInput } from '../validation.js';
import { checkRequestStrings, readJsonBody } from './body.js';
import type { Cancellation, Route, RouteAccess, RouteCall } from './route-table.js';
import { whenClosed } from './request-objects.js';
import './context.js';

/**
 * Mounts a route table on one Express router. Everything about a route is derived from its entry,
 * in this order: access (identity, admin, internal) → body (limit, or left unread) → validation of
 * body, query and params → handler → JSON answer. A path the table knows under other methods only
 * answers 405 with `Allow` (before credentials or body are looked at); a path no entry matches falls
 * through untouched, so the app answers 404 before reading or checking any body.
 */
export interface MountOptions {
  users: UserDirectory;
  /** Body limit of routes that declare none (the service's `JSON_BODY_LIMIT`). */
  bodyLimit: number;
  /** Deepest nesting accepted in a JSON body (`JSON_MAX_DEPTH`). */
  jsonMaxDepth?: number;
  /**
   * Prefixes under which every route is mounted as well, e.g. `['/llm']`: `/v1/models` and
   * `/llm/v1/models` are then the same endpoint.
   */
  aliases?: string[];
}

const INTERNAL_PREFIX = '/internal/';

/** Set on routers made by `mountRoutes`, with their table: lets tooling tell them from hand-mounted routers. */
export const ROUTE_TABLE = Symbol.for('kit.routeTable');

/**
 * Set on routers made by `mountRoutes`: the handlers of the parameter-free paths by `METHOD path`
 * (see `exactRoutes`), for the service app's direct dispatch (`createServiceApp`).
 */
export const EXACT_ROUTES = Symbol.for('kit.exactRoutes');

export function mountRoutes(routes: readonly Route[], options: MountOptions): Router {
  // Paths are exact: `/v1/Models` and `/v1/models/` are not `/v1/models` (they answer 404).
  const router = express.Router({ caseSensitive: true, strict: true });
  const seen = new Set<string>();
  const handlers: Array<{ route: Route; handler: RequestHandler }> = [];
  for (const route of routes) {
    checkEntry(route);
    const key = `${route.method} ${route.path}`;
    if (seen.has(key)) throw new Error(`route table: ${key} is declared twice`);
    seen.add(key);
    handlers.push({ route, handler: routeHandler(route, options) });
  }
  const exact = exactRoutes(handlers, options.aliases ?? []);
  if (exact.size > 0) {
    // Express tries every layer in turn (a regular expression each) until one matches: a route late in
    // a long table (chat completions) paid for every route before it on every request. A path with no
    // parameter is found here by one map lookup instead, then handled exactly as its own layer would.
    router.use((req, res, next) => {
      const handler = exact.get(`${req.method} ${req.path}`);
      if (handler) return handler(req, res, next);
      next();
    });
  }
  for (const { route, handler } of handlers) {
    for (const prefix of ['', ...(options.aliases ?? [])]) router[route.method](prefix + route.path, handler);
  }
  mountMethodNotAllowed(router, routes, options.aliases ?? []);
  Object.defineProperty(router, ROUTE_TABLE, { value: { routes, aliases: options.aliases ?? [] } });
  Object.defineProperty(router, EXACT_ROUTES, { value: exact });
  return router;
}

/**
 * The handlers of the parameter-free paths (aliases included) by `METHOD path`, for the entries
 * Express would reach first for that path: an entry is left to Express's own matching when an earlier
 * entry of the same method has a template that could match its path (Express answers with the first).
 * HEAD and OPTIONS are not listed (Express derives their answers), so they always take the long way.
 */
function exactRoutes(handlers: Array<{ route: Route; handler: RequestHandler }>, aliases: string[]): Map<string, RequestHandler> {
  const exact = new Map<string, RequestHandler>();
  const earlier: Array<{ method: string; matches: RegExp }> = [];
  for (const { route, handler } of handlers) {
    for (const prefix of ['', ...aliases]) {
      const path = prefix + route.path;
      const method = route.method.toUpperCase();
      const parametric = /[:*{}()?+\\]/.test(path);
      if (!parametric && !earlier.some((e) => e.method === method && e.matches.test(path))) exact.set(`${method} ${path}`, handler);
      earlier.push({ method, matches: templatePattern(path) });
    }
  }
  return exact;
}

/**
 * A pattern that matches at least every path Express would match with `template` (`:name` one
 * segment, `*name` one or more; a template with groups or other syntax matches everything here), so
 * the shadowing check in `exactRoutes` errs on the side of leaving a path to Express.
 */
function templatePattern(template: string): RegExp {
  if (/[{}()?+\\]/.test(template)) return /^/;
  const source = template
    .split(/(:\w+|\*\w+)/)
    .map((part) => (part.startsWith(':') ? '[^/]+' : part.startsWith('*') ? '.+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}$`);
}

/**
 * Reached only when no entry answered: every template matching the path (Express's own matching, so
 * parameters and wildcards behave as in the table) adds its method to the request's allowed set,
 * then a path with any allowed method is a 405 naming them. OPTIONS is left to Express's default.
 */
function mountMethodNotAllowed(router: Router, routes: readonly Route[], aliases: string[]): void {
  const methodsByPath = new Map<string, Set<string>>();
  for (const route of routes) {
    const methods = methodsByPath.get(route.path) ?? new Set<string>();
    methods.add(route.method.toUpperCase());
    if (route.method === 'get') methods.add('HEAD');
    methodsByPath.set(route.path, methods);
  }
  for (const [path, methods] of methodsByPath) {
    const collect: RequestHandler = (_req, res, next) => {
      const allowed: Set<string> = (res.locals.allowedMethods ??= new Set<string>());
      for (const method of methods) allowed.add(method);
      next();
    };
    for (const prefix of ['', ...aliases]) router.all(prefix + path, collect);
  }
  router.use((req, res, next) => {
    const allowed = res.locals.allowedMethods as Set<string> | undefined;
    if (!allowed || req.method === 'OPTIONS') return next();
    const allow = [...allowed].sort().join(', ');
    next(new ApiError(405, `${req.method} is not allowed on ${req.path}; allowed: ${allow}`, { headers: { allow } }));
  });
}

const ACCESS: readonly RouteAccess[] = ['public', 'user', 'admin', 'internal'];

function checkEntry(route: Route): void {
  if (!route.path.startsWith('/')) throw new Error(`route table: path "${route.path}" must start with /`);
  if (!ACCESS.includes(route.access)) throw new Error(`route table: ${route.method.toUpperCase()} ${route.path} needs an access (${ACCESS.join(', ')})`);
  if (route.access === 'internal' && !route.path.startsWith(INTERNAL_PREFIX)) {
    throw new Error(`route table: internal route ${route.path} must live under ${INTERNAL_PREFIX}`);
  }
  if (route.access !== 'internal' && route.path.startsWith(INTERNAL_PREFIX)) {
    throw new Error(`route table: ${route.path} is under ${INTERNAL_PREFIX} but not marked internal`);
  }
  if (route.bodyLimit !== undefined && !(Number.isInteger(route.bodyLimit) && route.bodyLimit > 0)) {
    throw new Error(`route table: ${route.path} has an invalid bodyLimit`);
  }
}

const CURSOR_KEYS = ['after', 'before'] as const;

/**
 * The cursors a list paged by `limit` and `offset` does not take. Dropped like any unknown query
 * parameter, `after` would hand a client that pages by cursor the first page again, forever.
 */
function refusedCursors(route: Route): readonly string[] {
  const shape = queryShape(route);
  return shape && 'offset' in shape ? CURSOR_KEYS.filter((key) => !(key in shape)) : [];
}

function queryShape(route: Route): Record<string, unknown> | undefined {
  return (route.request?.query as { shape?: Record<string, unknown> } | undefined)?.shape;
}

/** Says how the list does page, so a client sent away from `before` learns what to send instead. */
function pagingWords(route: Route): string {
  const shape = queryShape(route);
  return shape && 'after' in shape ? 'by the `after` cursor (and limit and offset)' : 'by limit and offset';
}

function routeHandler(route: Route, options: MountOptions): RequestHandler {
  const limit = route.bodyLimit ?? options.bodyLimit;
  const status = route.response?.status ?? 200;
  const cursors = refusedCursors(route);
  const paging = cursors.length > 0 ? pagingWords(route) : '';
  const noStore = route.response?.noStore === true;
  return async (req, res, next) => {
    try {
      // Refusals too: a 4xx of a credential route may echo what was sent.
      if (noStore) res.setHeader('cache-control', 'no-store');
      // Metrics label every request by the template it matched, aliases included in one series.
      res.locals.routeTemplate = route.path;
      let principal = authorize(route, req, options.users);
      if (isPending(principal)) principal = await principal; // a user not in the directory's cache
      if (principal) req.principal = principal;
      // Express 5 parses the query string again on every read of `req.query`: read once.
      const rawQuery = req.query;
      checkRequestStrings(req.path, rawQuery);
      for (const key of cursors) {
        if ((rawQuery as Record<string, unknown>)[key] !== undefined) throw new ApiError(400, `This list pages ${paging}; '${key}' is not supported`, { param: key });
      }
      const rawBody = route.body === 'stream' ? undefined : await readJsonBody(req, { limit, maxDepth: options.jsonMaxDepth, rawMembers: route.rawMembers });
      if (route.body !== 'stream') req.body = rawBody;
      const schemas = route.request ?? {};
      const body = schemas.body ? parseBody(schemas.body, rawBody) : rawBody;
      const query = schemas.query ? parseInput(schemas.query, rawQuery) : rawQuery;
      const rawParams = joinedParams(req.params);
      const params = schemas.params ? parseInput(schemas.params, rawParams) : rawParams;
      const call = new Call(req, res, principal as Principal, body, query, params);
      let result;
      try {
        result = await route.handler(call);
      } finally {
        call.cancellation.handlerReturned = true;
      }
      if (res.headersSent || res.writableEnded) return;
      if (result !== undefined) answerJson(res, status, result);
      else if (status === 204) res.status(204).end();
    } catch (error) {
      // `next()` with nothing (a rejection without a reason) would read as "not handled here": the
      // request fell through to a 404 or a 405 on a route that exists, instead of the 500 it is.
      next(error || new Error(`the route failed without an error (${String(error)})`));
    }
  };
}

/** A `*wildcard` parameter (model ids with slashes) arrives as its segments: joined back here. */
function joinedParams(params: Record<string, string | string[]>): Record<string, string> {
  const joined: Record<string, string> = {};
  for (const name in params) {
    const value = params[name]!;
    joined[name] = Array.isArray(value) ? value.join('/') : value;
  }
  return joined;
}

/**
 * What Express's `res.status(status).json(body)` sends, written directly: the same bytes and headers
 * (`application/json; charset=utf-8`, Content-Length; ETags are off in every service app), without
 * Express's settings lookups, content-type parsing, Buffer copy and freshness check on every answer.
 * Node omits the body of a HEAD answer itself. A content type set by the handler, or a status
 * without a body, takes Express's way.
 */
function answerJson(res: Response, status: number, body: unknown): void {
  if (status === 204 || status === 304 || res.hasHeader('content-type')) {
    res.status(status).json(body);
    return;
  }
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}

/**
 * The caller of `route`, or null where none is needed. `internal` routes are called by other
 * services for themselves: a request carrying the edge's identity headers came (or pretends to
 * come) from a user, so it is refused rather than trusted.
 */
function authorize(route: Route, req: Request, users: UserDirectory): MaybePromise<Principal | null> {
  if (route.access === 'internal') {
    if (hasIdentityHeaders(req)) throw new ApiError(403, 'This endpoint is for internal service calls only');
    return null;
  }
  const principal = resolvePrincipal(users, req);
  return isPending(principal) ? principal.then((settled) => allowed(route, settled)) : allowed(route, principal);
}

function allowed(route: Route, principal: Principal | null): Principal | null {
  if (route.access === 'public') return principal;
  if (!principal) throw new ApiError(401, 'Missing or invalid credentials');
  if (route.access === 'admin' && !principal.isAdmin) throw new ApiError(403, 'Administrator rights are required');
  return principal;
}

/**
 * A route's call. Its AbortSignal is made on first use: Node builds every AbortSignal by changing
 * the prototype of a plain EventTarget, which V8 handles as badly as it does such req and res
 * objects (request-objects.ts), and most routes never read it. `cancellation` (the chat route's)
 * makes none.
 */
class Call implements RouteCall {
  readonly cancellation: ClientCancellation;

  constructor(
    readonly req: Request,
    readonly res: Response,
    readonly principal: Principal,
    readonly body: unknown,
    readonly query: unknown,
    readonly params: Record<string, string>,
  ) {
    this.cancellation = new ClientCancellation(res);
  }

  get signal(): AbortSignal {
    return this.cancellation.abortSignal;
  }
}

/**
 * Aborted with `ClientClosed` when the answer's connection closes before the answer is complete,
 * and when the answer ends before the route's handler has returned, that is, when someone else
 * answered on the route's response: the embedded edge, which hands a request to an in-process
 * service on the client's own response object, writes its 504 there once the service wrote
 * nothing for `EDGE_UPSTREAM_READ_TIMEOUT_MS`, and that answer completes normally. (Over HTTP the
 * edge closes its connection to the service instead, the first case.) A handler that writes its
 * own answer (a stream) returns right after ending it, before the response's 'close', which
 * follows the end by at least a turn of the event loop. A response that ended or closed before
 * the handler is called (while the body was read) aborts at once. No listener of its own: the
 * check rides on the close hook every route already had, and `handlerReturned` is one field.
 */
class ClientCancellation extends CancelToken implements Cancellation {
  /** Set by the mount once the route's handler has returned (or thrown). */
  handlerReturned = false;

  constructor(res: Response) {
    super();
    if (res.writableEnded || res.destroyed) {
      this.abort(new ClientClosed());
      return;
    }
    whenClosed(res, () => {
      if (!res.writableFinished || !this.handlerReturned) this.abort(new ClientClosed());
    });
  }

  get signal(): CancelToken {
    return this;
  }
}
