import { Agent } from 'undici';
import type { CancelSignal } from './cancel.js';
import { ApiError } from './errors.js';
import { GATEWAY_TOKEN_HEADER, identityHeadersFor, type Principal } from './identity/principal.js';
import { toWellFormed } from './validation.js';

/**
 * Service-to-service calls go straight to the other service's internal address (never through
 * the public edge) with the caller's identity headers and the gateway token, over kept-alive
 * connections, with a timeout. Failures map to 502/503/504 in shape A; a refusal the other service
 * answered becomes this service's error through `relayError`.
 */
export interface InternalClientOptions {
  /**
   * The other service's address. A function is asked at every call: an address known only once
   * the other service listens (port 0 in tests, the all-in-one start) is read when it is needed,
   * and a changed one is followed. The connection pool is per origin, so nothing is rebuilt.
   */
  baseUrl: string | (() => string);
  gatewayToken?: string;
  timeoutMs?: number;
  connections?: number;
}

export interface InternalResponse<T = unknown> {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: T;
}

export interface InternalStream {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The body as it arrives; `text()` reads it whole (error answers), `dump()` discards it. */
  body: AsyncIterable<Uint8Array> & { text(): Promise<string>; dump(): Promise<void> };
}

export interface InternalCallOptions {
  principal?: Principal;
  body?: unknown;
  headers?: Record<string, string>;
  requestId?: string;
  timeoutMs?: number;
  signal?: CancelSignal;
}

export function createInternalClient(options: InternalClientOptions) {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: options.connections ?? 128 });
  const timeoutMs = options.timeoutMs ?? 30_000;
  const baseUrl = typeof options.baseUrl === 'function' ? options.baseUrl : () => options.baseUrl as string;
  // The other service's origin, parsed again only when its address changes.
  let lastBase: string | undefined;
  let lastOrigin = '';
  const originOf = (base: string) => {
    if (base !== lastBase) {
      lastOrigin = new URL(base).origin;
      lastBase = base;
    }
    return lastOrigin;
  };

  async function send(method: string, path: string, opts: InternalCallOptions, accept: string) {
    const headers: Record<string, string> = { accept, ...opts.headers };
    if (options.gatewayToken) headers[GATEWAY_TOKEN_HEADER] = options.gatewayToken;
    if (opts.principal) Object.assign(headers, identityHeadersFor(opts.principal));
    if (opts.requestId) headers['x-request-id'] = opts.requestId;
    let payload: string | undefined;
    if (opts.body !== undefined) {
      payload = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    const limit = opts.timeoutMs ?? timeoutMs;
    try {
      // The path goes to the other service's origin as it is: never resolved against the address
      // as a URL, where `//host/…` or `/\host/…` would name another host (which would receive
      // the gateway token and the caller's identity) and `..` segments (a model id of `..`, say)
      // would climb to another route of the service.
      return await agent.request({
        origin: originOf(baseUrl()),
        path: requestTarget(path),
        method: method as 'GET',
        headers,
        body: payload,
        headersTimeout: limit,
        bodyTimeout: limit,
        // undici takes any object with addEventListener as a signal (CancelSignal's contract).
        signal: opts.signal as AbortSignal | undefined,
      });
    } catch (error) {
      throw failure(error, opts.signal);
    }
  }

  async function call<T = unknown>(method: string, path: string, opts: InternalCallOptions = {}): Promise<InternalResponse<T>> {
    const res = await send(method, path, opts, 'application/json');
    try {
      const text = await res.body.text();
      const isJson = String(res.headers['content-type'] ?? '').includes('json');
      return { status: res.statusCode, headers: res.headers, body: (isJson && text ? JSON.parse(text) : text) as T };
    } catch (error) {
      throw failure(error, opts.signal);
    }
  }

  /**
   * The same call with the answer's body left unread, for the caller to consume as it arrives
   * (server-sent events of another service). The caller reads or dumps `body`.
   */
  async function open(method: string, path: string, opts: InternalCallOptions = {}): Promise<InternalStream> {
    const res = await send(method, path, opts, 'text/event-stream, application/json');
    return { status: res.statusCode, headers: res.headers, body: res.body };
  }

  return { call, open, close: () => agent.close() };
}

/**
 * `path` as the request target, taken as it is: spaces, controls and non-ASCII characters (which
 * a request line cannot carry) percent-encoded as a URL would encode them, nothing else touched.
 */
function requestTarget(path: string): string {
  const target = path.startsWith('/') ? path : `/${path}`;
  // encodeURIComponent throws on a lone surrogate; a URL writes it as U+FFFD, and so does this.
  return UNSENDABLE.test(target) ? target.replace(UNSENDABLE_ALL, (chars) => encodeURIComponent(toWellFormed(chars))) : target;
}
const UNSENDABLE = /[^\x21-\x7e]/;
const UNSENDABLE_ALL = /[^\x21-\x7e]+/g;

/** The caller's own abort is not a failure of the other service; anything else maps to 503/504. */
function failure(error: unknown, signal: CancelSignal | undefined): unknown {
  if (signal?.aborted) return signal.reason;
  if (error instanceof SyntaxError) return new ApiError(502, 'An internal service answered with malformed JSON', { cause: error });
  const code = (error as { code?: string }).code ?? '';
  if (code.includes('TIMEOUT')) return new ApiError(504, 'An internal service did not answer in time', { cause: error });
  return new ApiError(503, 'An internal service is unavailable', { cause: error });
}

export type InternalClient = ReturnType<typeof createInternalClient>;

export interface RelayOptions {
  /** What was asked, for the message when the other service gave none: `<what> failed (<status>)`. */
  what: string;
  /** The field of this service's request the refusal is about; without it, the other service's `param` is kept. */
  param?: string;
  /** The refusals passed on with their own status; by default every 4xx. Any other answer is a 502. */
  statuses?: readonly number[];
  /** A refusal's field by its code, where the other service named none of this service's request (`model_not_found` → `model`). */
  paramOfCode?: Readonly<Record<string, string>>;
}

/**
 * The other service's error answer as this service's error (thrown): a refusal keeps its status,
 * message and code, and when to retry (`retry-after`, `retry-after-ms`); anything else is a 502
 * `upstream_error` with the other service's message. `body` is the parsed answer or its text (a
 * streamed call's error answer, read whole), and may be no JSON at all.
 */
export function relayError(res: { status: number; body: unknown; headers?: Record<string, unknown> }, options: RelayOptions): never {
  const error = errorOf(res.body);
  const message = typeof error?.message === 'string' ? error.message : `${options.what} failed (${res.status})`;
  const relayed = options.statuses ? options.statuses.includes(res.status) : res.status >= 400 && res.status < 500;
  if (!relayed) throw new ApiError(502, message, { code: 'upstream_error', param: options.param ?? null });
  const headers = res.headers ?? {};
  const retry = Object.fromEntries(['retry-after', 'retry-after-ms'].filter((h) => typeof headers[h] === 'string').map((h) => [h, headers[h] as string]));
  throw new ApiError(res.status, message, {
    code: typeof error?.code === 'string' ? error.code : undefined,
    param: options.param ?? (typeof error?.code === 'string' ? options.paramOfCode?.[error.code] : undefined) ?? (typeof error?.param === 'string' ? error.param : null),
    headers: retry,
  });
}

function errorOf(body: unknown): { message?: unknown; code?: unknown; param?: unknown } | undefined {
  let parsed = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  const error = (parsed as { error?: unknown } | null)?.error;
  return error !== null && typeof error === 'object' ? error : undefined;
}

/** The refusals of media-api that are the caller's to fix: a malformed payload, media not found or not theirs, too large. */
export const MEDIA_REFUSALS = [400, 404, 413] as const;

/**
 * media-api's `POST /v1/media/resolve`, asked as the caller: `payload` (any JSON) comes back with
 * each media reference replaced by a download URL. A reference the caller does not own is a 404
 * naming it, given `param` (the caller's field that held the payload).
 */
export async function resolveMediaReferences<T>(client: InternalClient, principal: Principal, payload: T, options: { param: string; signal?: CancelSignal }): Promise<T> {
  const res = await client.call<{ payload: T }>('POST', '/v1/media/resolve', { principal, body: { payload }, signal: options.signal });
  if (res.status !== 200) relayError(res, { what: 'Resolving media references', param: options.param, statuses: MEDIA_REFUSALS });
  return res.body.payload;
}
