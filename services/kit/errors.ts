/**
 * One error helper for every service: SPEC.md shape A
 * `{"error":{"type","code","message","param","request_id"}}` with the status → type → code table of
 * ARCHITECTURE.md (which extends SPEC.md section 7).
 */

export interface ErrorBody {
  error: { type: string; code: string; message: string; param: string | null; request_id?: string };
}

/** Default type and code per HTTP status; a thrower may override the code (e.g. `model_not_found`). */
const STATUS_TABLE: Record<number, { type: string; code: string }> = {
  400: { type: 'invalid_request_error', code: 'invalid_parameter' },
  401: { type: 'auth_error', code: 'unauthorized' },
  403: { type: 'permission_error', code: 'forbidden' },
  404: { type: 'not_found_error', code: 'not_found' },
  405: { type: 'invalid_request_error', code: 'method_not_allowed' },
  408: { type: 'invalid_request_error', code: 'request_timeout' },
  409: { type: 'invalid_request_error', code: 'conflict' },
  413: { type: 'invalid_request_error', code: 'payload_too_large' },
  415: { type: 'invalid_request_error', code: 'unsupported_media_type' },
  431: { type: 'invalid_request_error', code: 'request_header_fields_too_large' },
  429: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  500: { type: 'internal_error', code: 'server_error' },
  501: { type: 'invalid_request_error', code: 'not_implemented' },
  502: { type: 'internal_error', code: 'upstream_error' },
  503: { type: 'internal_error', code: 'service_unavailable' },
  504: { type: 'internal_error', code: 'upstream_timeout' },
};

export function errorTypeFor(status: number): { type: string; code: string } {
  return STATUS_TABLE[status] ?? (status >= 500 ? STATUS_TABLE[500]! : STATUS_TABLE[400]!);
}

/**
 * The longest wait an answer may ask a client to retry after. The official OpenAI SDKs retry 409,
 * 429 and 5xx answers on their own and sleep for whatever `Retry-After` says (openai-node 6 does so
 * without a cap: a monthly budget's reset weeks away parks the call, and a wait past Node's timer
 * range turns into instant retries), unless `x-should-retry: false` tells them not to.
 */
export const MAX_RETRY_AFTER_SECONDS = 60;
export const SHOULD_RETRY_HEADER = 'x-should-retry';

/**
 * `headers` plus `x-should-retry: false` where a retry cannot succeed soon: a `Retry-After` longer
 * than a minute (a spent budget or quota, a locked sign-in), 409 (every conflict here is the state
 * of a resource, never a lock that frees itself) and 501 (a planned endpoint). A header the thrower
 * set itself is kept.
 */
export function withRetryAdvice(status: number, headers: Record<string, string>): Record<string, string> {
  if (SHOULD_RETRY_HEADER in headers) return headers;
  const retryAfter = Number(headers['retry-after'] ?? headers['Retry-After']);
  if (status === 409 || status === 501 || retryAfter > MAX_RETRY_AFTER_SECONDS) return { ...headers, [SHOULD_RETRY_HEADER]: 'false' };
  return headers;
}

export interface ApiErrorOptions {
  code?: string;
  param?: string | null;
  headers?: Record<string, string>;
  cause?: unknown;
}

/** An error that is meant to reach the client: status, message and optional param/code. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly type: string;
  readonly param: string | null;
  readonly headers: Record<string, string>;

  constructor(status: number, message: string, options: ApiErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const defaults = errorTypeFor(status);
    this.name = 'ApiError';
    this.status = status;
    this.type = defaults.type;
    this.code = options.code ?? defaults.code;
    this.param = options.param ?? null;
    this.headers = withRetryAdvice(status, options.headers ?? {});
  }

  toBody(requestId?: string): ErrorBody {
    return errorBody(this.status, this.message, { code: this.code, param: this.param, requestId });
  }
}

/** Why a request's signal was aborted when its client went away before the answer was complete. */
export class ClientClosed extends Error {
  constructor() {
    super('the client closed the connection');
    this.name = 'ClientClosed';
  }
}

export function errorBody(
  status: number,
  message: string,
  options: { code?: string; param?: string | null; requestId?: string } = {},
): ErrorBody {
  const defaults = errorTypeFor(status);
  const body: ErrorBody = {
    error: { type: defaults.type, code: options.code ?? defaults.code, message, param: options.param ?? null },
  };
  if (options.requestId) body.error.request_id = options.requestId;
  return body;
}

export const badRequest = (message: string, param?: string, code?: string) =>
  new ApiError(400, message, { param: param ?? null, code });
export const unauthorized = (message = 'Missing or invalid credentials') => new ApiError(401, message);
export const forbidden = (message = 'Access denied') => new ApiError(403, message);
/** `param`: the request field that named what was not found, when it came from the body or the query. */
export const notFound = (message = 'Resource not found', code?: string, param?: string) => new ApiError(404, message, { code, param: param ?? null });
export const conflict = (message: string, param?: string) => new ApiError(409, message, { param: param ?? null });

// Network failures (a dependency's server gone or refusing) and PostgreSQL's "connection exception"
// class 08, shutdown and overload states, and a statement cancelled by DATABASE_QUERY_TIMEOUT_MS
// (57014 from the server, "Query read timeout" from the client when no answer came at all),
// and DATABASE_CONNECT_TIMEOUT_MS passing while a connection opens (pg's bare "timeout expired").
// Anything else stays an internal error.
const UNAVAILABLE_ERRNO = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
const UNAVAILABLE_SQLSTATE = /^(08...|57P01|57P02|57P03|53300|57014)$/;
// Searched anywhere: knex prefixes the SQL statement ("ROLLBACK - Client has encountered …").
const UNAVAILABLE_MESSAGE = /Connection terminated|Connection ended unexpectedly|Client has encountered a connection error|Timeout acquiring a connection|Connection is closed|connect ECONNREFUSED|Query read timeout|(^|- )timeout expired$/;

/**
 * Whether an error means a dependency (database, broker, cache) cannot be reached right now rather
 * than a fault in the request or the code: the kit answers these 503 `service_unavailable`, so a
 * client (or load balancer) retries later instead of reporting a server bug. Follows `cause` chains.
 */
export function isDependencyUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current && depth < 5; depth++) {
    const e = current as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown };
    if (typeof e.code === 'string' && (UNAVAILABLE_ERRNO.has(e.code) || UNAVAILABLE_SQLSTATE.test(e.code))) return true;
    // The bus's own "broker away" (kit/bus): a send while RabbitMQ is down is as retryable as a query while PostgreSQL is.
    if (e.name === 'KnexTimeoutError' || e.name === 'BusUnavailableError') return true;
    if (typeof e.message === 'string' && UNAVAILABLE_MESSAGE.test(e.message)) return true;
    current = e.cause;
  }
  return false;
}

/** Where a server named by a URL setting listens: its host without IPv6 brackets, and its port. */
export function serverAddress(url: URL, defaultPort: number): { address: string; port: number } {
  return { address: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || defaultPort) };
}

/**
 * A failure to reach a server, shaped as Node's socket errors are (`code`, `syscall`, `address`,
 * `port`), for failures a client library reports without them (a timeout of its own, a refused
 * login): the start's one line (services/platform/startup-errors.ts) finds the setting by address
 * and port. `reply` is the server's refusal, its first word only, never what else it said.
 */
export function serverFailure(where: { address: string; port: number }, code: string, syscall: string, detail: string, reply?: string): Error & { code: string; syscall: string; address: string; port: number; reply?: string } {
  return Object.assign(new Error(`${syscall} ${code} ${where.address}:${where.port}${detail}`), { code, syscall, address: where.address, port: where.port, ...(reply ? { reply } : {}) });
}
