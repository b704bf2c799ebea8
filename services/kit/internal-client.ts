import { Agent, request } from 'undici';
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

export function createInternalClient(options: InternalClientOptions) {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: options.connections ?? 128 });
  const timeoutMs = options.timeoutMs ?? 30_000;

  async function call<T = unknown>(
    method: string,
    path: string,
    opts: { principal?: Principal; body?: unknown; headers?: Record<string, string>; requestId?: string; timeoutMs?: number } = {},
  ): Promise<InternalResponse<T>> {
    const headers: Record<string, string> = { accept: 'application/json', ...opts.headers };
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
      const res = await request(new URL(path, options.baseUrl), {
        method: method as 'GET',
        headers,
        body: payload,
        dispatcher: agent,
        headersTimeout: limit,
        bodyTimeout: limit,
      });
      const text = await res.body.text();
      const isJson = String(res.headers['content-type'] ?? '').includes('json');
      return { status: res.statusCode, headers: res.headers, body: (isJson && text ? JSON.parse(text) : text) as T };
    } catch (error) {
      const code = (error as { code?: string }).code ?? '';
      if (code.includes('TIMEOUT')) throw new ApiError(504, 'An internal service did not answer in time', { cause: error });
      throw new ApiError(503, 'An internal service is unavailable', { cause: error });
    }
  }

  return { call, close: () => agent.close() };
}

export type InternalClient = ReturnType<typeof createInternalClient>;
