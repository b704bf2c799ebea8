import type { Request, Response } from 'express';
import type { z } from 'zod';
import { ApiError } from '../errors.js';
import type { CancelSignal } from '../cancel.js';
import type { Principal } from '../identity/principal.js';

/**
 * Routes as data. Every resource exports `routes(deps): Route[]`; the kit mounts the list, and the
 * same list feeds the OpenAPI document and docs/api.md. Whether a route is public, admin-only or
 * internal, and its body limit, are read from the entry, never from a parallel list of paths.
 *
 * `routes(deps)` must not touch `deps` while building the list (only inside handlers), so the
 * document generator can build every table without starting a service.
 */
export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';

/**
 * - `public`: no credential needed (the principal is set when one was sent);
 * - `user`: any authenticated caller;
 * - `admin`: authenticated and `is_admin` (403 otherwise);
 * - `internal`: service-to-service only: the path starts with `/internal/` (no deck route forwards it),
 *   and a request carrying edge identity headers is refused.
 */
export type RouteAccess = 'public' | 'user' | 'admin' | 'internal';

export interface RouteCall<B = unknown, Q = unknown, P = Record<string, string>> {
  req: Request;
  res: Response;
  /** Set for `user` and `admin` routes; on `public` and `internal` routes it may be null. */
  principal: Principal;
  body: B;
  query: Q;
  params: P;
  /**
   * Aborted when the client goes away before the answer is complete (reason: `ClientClosed`), or by
   * the handler through `cancellation`. Made when first read: most routes never need one.
   */
  readonly signal: AbortSignal;
  /** The signal and the means to abort it early, for a domain function with a deadline of its own. */
  readonly cancellation: Cancellation;
}

/**
 * A request's cancellation and its `abort` (the first reason wins). An AbortController is one; a
 * route's is a kit `CancelToken`, whose signal is a plain object (no AbortSignal is made).
 */
export interface Cancellation {
  readonly signal: CancelSignal;
  abort(reason: unknown): void;
}

export interface RouteResponse {
  /** Success status (default 200). */
  status?: number;
  schema?: z.ZodType;
  /** Default `application/json`; e.g. `text/event-stream`, `image/*`, `text/csv`. */
  contentType?: string;
  description?: string;
  /**
   * The answer carries a credential shown once (tokens, a new API key, a signing secret, a temporary
   * password): sent with `Cache-Control: no-store`, so no cache, the browser's included, keeps a copy
   * (RFC 6749 5.1 asks it of token answers).
   */
  noStore?: true;
}

export interface Route<B = any, Q = any, P = any> {
  method: HttpMethod;
  /** Express 5 path template without the `/llm` alias, e.g. `/v1/projects/:projectId`. */
  path: string;
  /** One line: what it does (OpenAPI summary, docs/api.md). */
  summary: string;
  access: RouteAccess;
  /** OpenAPI tag; defaults to the service name. */
  tag?: string;
  /** `json` (default): parsed and depth-checked by the kit. `stream`: left unread for the handler (multipart, uploads). */
  body?: 'json' | 'stream';
  /** Body limit in bytes; default: the service's `JSON_BODY_LIMIT`. */
  bodyLimit?: number;
  /**
   * Top-level members of a `json` body that the handler forwards as they are: their bytes are kept
   * on `req.rawMembers` (`RawJsonMembers`), so they need not be serialised again.
   */
  rawMembers?: readonly string[];
  request?: {
    body?: z.ZodType<B>;
    query?: z.ZodType<Q>;
    params?: z.ZodType<P>;
    /** Content type of a `stream` body, for the document (e.g. `multipart/form-data`). */
    contentType?: string;
  };
  response?: RouteResponse;
  /**
   * Planned but not built yet: the endpoint is part of the API's surface (clients of the
   * chat-completions schema call it) but answers 501 `not_implemented`. Made with `plannedRoute`.
   */
  planned?: true;
  /**
   * Returns the JSON answer (sent with `response.status`), or writes `res` itself (streams,
   * files) and returns undefined.
   */
  handler(call: RouteCall<B, Q, P>): unknown | Promise<unknown>;
}

/** Typed constructor: infers `body`, `query` and `params` of the handler from the schemas. */
export function route<B = unknown, Q = unknown, P = Record<string, string>>(definition: Route<B, Q, P>): Route {
  return definition as Route;
}

/**
 * An endpoint that is planned but not built yet: authenticated like any `user` route, then 501
 * `not_implemented` in the standard error body, without reading the body. Declared in the route
 * table so the API document lists it (as 501) and a later build replaces the entry in place.
 */
export function plannedRoute(definition: { method: HttpMethod; path: string; summary: string; tag?: string }): Route {
  return {
    ...definition,
    access: 'user',
    body: 'stream',
    planned: true,
    response: { status: 501, description: 'Not built yet' },
    handler: () => {
      throw new ApiError(501, `${definition.method.toUpperCase()} ${definition.path} is planned but not built yet`);
    },
  };
}

/** A route of a group: its method and path are arguments; `access` and `tag` may be left to the group's defaults. */
export interface GroupRoute<B = any, Q = any, P = any> extends Omit<Route<B, Q, P>, 'method' | 'path' | 'access'> {
  access?: RouteAccess;
}

type GroupMethod = <B = unknown, Q = unknown, P = Record<string, string>>(path: string, definition: GroupRoute<B, Q, P>) => Route;
export type RouteGroup = Record<HttpMethod, GroupMethod>;

/**
 * The routes of one resource, declared the way Express reads (`projects.get(path, {...})`), with
 * what they share set once: the OpenAPI tag, and the access when every route has the same
 * (`const projects = routeGroup({ tag: 'projects', access: 'user' })`). An entry may still set its
 * own `access` or `tag`; a group without an `access` default needs it on every entry (checked at mount).
 */
export function routeGroup(defaults: { access?: RouteAccess; tag?: string }): RouteGroup {
  const entry =
    (method: HttpMethod): GroupMethod =>
    (path, definition) =>
      ({ method, path, ...defaults, ...definition }) as Route;
  return { get: entry('get'), post: entry('post'), put: entry('put'), patch: entry('patch'), delete: entry('delete') };
}
