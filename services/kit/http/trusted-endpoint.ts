/**
 * Calls to an endpoint the operator configured (a search backend, an embeddings server, a remote
 * sandbox, the identity provider): one timeout per call that covers the answer's body too, the
 * base URL joined one way, the body read as a stream up to a byte limit (never buffered without
 * bound), and failures as one error whose message names the endpoint but never its key or query.
 *
 * These calls do not go through the egress guard (kit/egress.ts). The guard is for URLs a user
 * supplies; these addresses come from the operator's configuration, and are often private on
 * purpose (a SearXNG, sandbox or Keycloak next to the platform; 127.0.0.1 in tests), which the
 * guard's private-address refusal would reject. A user's input reaches only their path, query or
 * body, never the host. Global fetch is used (not undici's `request`) so tests can answer these
 * third parties with nock.
 */
export const TRUSTED_ENDPOINT_MAX_BYTES = 8 * 1024 * 1024;

export type TrustedEndpointFailure = 'unreachable' | 'timeout' | 'status' | 'too_large' | 'not_json';

export class TrustedEndpointError extends Error {
  constructor(
    /** The endpoint's name as configured in `TrustedEndpointOptions.name`. */
    readonly endpoint: string,
    readonly failure: TrustedEndpointFailure,
    message: string,
    /** The HTTP status, once the endpoint answered. */
    readonly status: number | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'TrustedEndpointError';
  }
}

export interface TrustedEndpointOptions {
  /** Names the endpoint in error messages, e.g. `Serper` or `the embeddings endpoint`. */
  name: string;
  /** Paths are resolved below it, whether or not it ends with a slash. */
  baseUrl: string;
  /** Per call, until the body is read; a call may set its own. Default 30 s. */
  timeoutMs?: number;
  /** The most an answer's body may hold. Default `TRUSTED_ENDPOINT_MAX_BYTES`. */
  maxBytes?: number;
  /** Sent with every call (an API key). */
  headers?: Record<string, string>;
}

export interface TrustedRequest {
  /** Default GET, or POST when a body is given. */
  method?: string;
  /** A body sent as JSON. */
  json?: unknown;
  /** A body sent as `application/x-www-form-urlencoded`. */
  form?: Record<string, string>;
  /** Added to the path's query; undefined values are left out. */
  query?: Record<string, string | undefined>;
  headers?: Record<string, string>;
  /** The caller's cancellation: its reason is thrown as it is, not as a failure of the endpoint. */
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** An answer with its body read whole (within the byte limit), whatever its status. */
export interface TrustedResponse {
  status: number;
  ok: boolean;
  headers: Headers;
  text: string;
  /** The body parsed; a body that is not JSON throws a `not_json` error. */
  json<T = unknown>(): T;
}

export function createTrustedEndpoint(options: TrustedEndpointOptions) {
  const base = options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`;
  const maxBytes = options.maxBytes ?? TRUSTED_ENDPOINT_MAX_BYTES;
  const fail = (failure: TrustedEndpointFailure, detail: string, status: number | null = null, cause?: unknown) =>
    new TrustedEndpointError(options.name, failure, `${options.name} ${detail}`, status, cause === undefined ? undefined : { cause });

  const below = new URL(base);

  /**
   * `path` is relative to the base URL: a leading slash does not drop the base URL's own path. A
   * path that would leave it (an absolute URL, `..` or `%2e%2e` segments, which URL resolution
   * climbs) is refused before anything is sent: it would reach another endpoint, or another host,
   * with this endpoint's headers (its key).
   */
  function urlOf(path: string, query: TrustedRequest['query']): URL {
    const url = new URL(path.replace(/^\/+/, ''), base);
    if (url.origin !== below.origin || !url.pathname.startsWith(below.pathname) || DOT_SEGMENT.test(path.split(/[?#]/, 1)[0]!)) {
      throw new TypeError(`${options.name}: the path "${path.split('?')[0]!.slice(0, 200)}" leaves the endpoint's base URL`);
    }
    for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined) url.searchParams.set(key, value);
    return url;
  }

  /** Any answer, its body read; only a failure to get one (or one too large) throws. */
  async function request(path: string, init: TrustedRequest = {}): Promise<TrustedResponse> {
    const headers: Record<string, string> = { accept: 'application/json', ...options.headers, ...init.headers };
    let body: string | undefined;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers['content-type'] = 'application/json';
    } else if (init.form !== undefined) {
      body = new URLSearchParams(init.form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    // Before the try: a path that leaves the base URL is the caller's mistake, not an outage.
    const url = urlOf(path, init.query);
    const timer = AbortSignal.timeout(init.timeoutMs ?? options.timeoutMs ?? 30_000);
    const signal = init.signal ? AbortSignal.any([init.signal, timer]) : timer;
    const broken = (error: unknown) => {
      if (init.signal?.aborted) return init.signal.reason;
      if (error instanceof TrustedEndpointError) return error;
      return timer.aborted ? fail('timeout', 'could not be reached (timed out)', null, error) : fail('unreachable', 'could not be reached (network error)', null, error);
    };
    let res: Response;
    try {
      res = await fetch(url, { method: init.method ?? (body === undefined ? 'GET' : 'POST'), headers, body, signal });
    } catch (error) {
      throw broken(error);
    }
    let text: string;
    try {
      text = await readBounded(res, maxBytes, () => fail('too_large', `answered with more than ${maxBytes} bytes`, res.status));
    } catch (error) {
      throw broken(error);
    }
    return {
      status: res.status,
      ok: res.ok,
      headers: res.headers,
      text,
      json<T>() {
        try {
          return JSON.parse(text) as T;
        } catch (error) {
          throw fail('not_json', 'answered with a body that is not JSON', res.status, error);
        }
      },
    };
  }

  /** A 2xx answer's JSON body; any other status throws a `status` error (`<name> answered HTTP <status>`). */
  async function json<T = unknown>(path: string, init: TrustedRequest = {}): Promise<T> {
    const res = await request(path, init);
    if (!res.ok) throw fail('status', `answered HTTP ${res.status}`, res.status);
    return res.json<T>();
  }

  return { request, json };
}

export type TrustedEndpoint = ReturnType<typeof createTrustedEndpoint>;

/** A `.` or `..` path segment in any spelling URL resolution reads as one (`%2e`, a backslash as the separator). */
const DOT_SEGMENT = /(^|[\\/])(\.|%2e){1,2}($|[\\/])/i;

/** The body as text, refused (and the rest of it left unread) once it passes `maxBytes`. */
async function readBounded(res: Response, maxBytes: number, tooLarge: () => Error): Promise<string> {
  if (!res.body) return '';
  const declared = Number(res.headers.get('content-length'));
  if (declared > maxBytes) {
    await res.body.cancel().catch(() => {});
    throw tooLarge();
  }
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, size).toString('utf8');
}
