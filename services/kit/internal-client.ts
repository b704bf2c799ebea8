import { Agent, request } from 'undici';
import type { CancelSignal } from './cancel.js';
import { ApiError } from './errors.js';
import { GATEWAY_TOKEN_HEADER, identityHeadersFor, type Principal } from './identity/principal.js';

/**
 * Service-to-service calls go straight to the other service's internal address (never through
 * the public edge) with the caller's identity headers and the gateway token, over kept-alive
 * connections, with a timeout. Failures map to 502/503/504 in shape A.
 */
export interface InternalClientOptions {
  baseUrl: string;
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
      return await request(new URL(path, options.baseUrl), {
        method: method as 'GET',
        headers,
        body: payload,
        dispatcher: agent,
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

/** The caller's own abort is not a failure of the other service; anything else maps to 503/504. */
function failure(error: unknown, signal: CancelSignal | undefined): unknown {
  if (signal?.aborted) return signal.reason;
  if (error instanceof SyntaxError) return new ApiError(502, 'An internal service answered with malformed JSON', { cause: error });
  const code = (error as { code?: string }).code ?? '';
  if (code.includes('TIMEOUT')) return new ApiError(504, 'An internal service did not answer in time', { cause: error });
  return new ApiError(503, 'An internal service is unavailable', { cause: error });
}

export type InternalClient = ReturnType<typeof createInternalClient>;
