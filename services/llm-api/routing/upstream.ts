import { Agent } from 'undici';
import type { CancelSignal, EgressGuard } from '../../kit/index.js';
import { bearer, getProviderJson, providerConnectOptions, STREAMS_PER_HTTP2_CONNECTION, type ProviderHttpVersion } from '../../../domains/catalog/index.js';
import { createProviderPool, type ProviderPoolProtocol } from './free-list-pool.js';
import { ProviderAnswer } from './provider-answer.js';

export { authHeaders, joinUrl } from '../../../domains/catalog/index.js';

/** Who a completion is sent for: the provider's key (null: none) and the request id it carries upstream. */
export interface ProviderCall {
  apiKey: string | null;
  requestId: string;
}

/**
 * HTTP to providers: one undici Agent (a keep-alive pool per origin) for every upstream call, so a
 * completion reuses a warm connection instead of paying a TCP handshake. Timeouts: connect,
 * headers (time to first byte) and body (idle time between chunks).
 */
export interface UpstreamOptions {
  connections: number;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  /** Where provider URLs may point (PROVIDER_URL_ALLOW); checked per request and at connect time. */
  guard?: EgressGuard;
  /** Largest body `getJson` reads (model lists, probes); larger: the connection is cut and it throws. Default 16 MiB. */
  maxBodyBytes?: number;
  /**
   * `'2'`: every provider connection speaks HTTP/2 and completions share a connection (the
   * catalog's `providerConnectOptions`). `'auto'`: they share the connections whose TLS handshake
   * chose HTTP/2, and the others carry one at a time. Default `'1.1'`: one completion per
   * connection at a time.
   */
  httpVersion?: ProviderHttpVersion;
}

export type UpstreamResponse = ProviderAnswer;

export function createUpstream(options: UpstreamOptions) {
  const http2 = options.httpVersion === '2' || options.httpVersion === 'auto';
  const protocol: ProviderPoolProtocol = options.httpVersion === 'auto' ? 'negotiated' : 'fixed';
  const agent = new Agent({
    // A connection is busy for a whole stream (HTTP/1.1) or at its stream limit (HTTP/2): the pool
    // finds a free one without walking them all.
    factory: (origin, poolOptions) => createProviderPool(origin, poolOptions, protocol),
    connections: options.connections,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 600_000,
    ...providerConnectOptions(options),
    ...(protocol === 'negotiated' ? { pipelining: STREAMS_PER_HTTP2_CONNECTION } : {}),
    headersTimeout: options.headersTimeoutMs,
    bodyTimeout: options.bodyTimeoutMs,
  });

  // Endpoint URLs that passed the guard, split into undici's origin and path. A completion goes to
  // one of a few endpoint URLs, and both the guard's verdict on a URL and its split depend on the
  // string alone (the resolved address is still checked at connect time, by `lookup`): parsing and
  // checking it again on every request was ~3 % of the chat path. Bounded: cleared when full.
  const checked = new Map<string, { origin: string; path: string }>();
  const target = (url: string) => {
    let known = checked.get(url);
    if (known === undefined) {
      const parsed = options.guard ? options.guard.checkUrl(url).url : new URL(url);
      known = { origin: parsed.origin, path: parsed.pathname + parsed.search };
      if (checked.size >= 1024) checked.clear();
      checked.set(url, known);
    }
    return known;
  };

  return {
    agent,
    // Not `async`: an async function would wrap the answer's promise in one more and resolve it two
    // microtask turns later, on every completion.
    postJson(url: string, body: string | Buffer, call: ProviderCall, signal?: CancelSignal): Promise<UpstreamResponse> {
      try {
        const { origin, path } = target(url);
        const answer = new ProviderAnswer(signal);
        agent.dispatch(
          {
            origin,
            path,
            method: 'POST',
            // One literal, one shape for every request: built by spreading a per-request headers object,
            // each request's headers got a hidden class of their own (docs/contributing.md). undici
            // skips a header whose value is undefined (a provider without a key).
            headers: {
              'content-type': 'application/json',
              accept: 'application/json, text/event-stream',
              authorization: bearer(call.apiKey),
              'x-request-id': call.requestId,
            },
            body,
            // undici holds a request that is not idempotent until its connection has nothing else
            // in flight, lest a failure take others with it: over HTTP/2 that would serialise every
            // completion on a connection. A completion is never retried by undici either way, and
            // on an HTTP/1.1 connection (one request at a time) the flag changes nothing.
            idempotent: http2,
          },
          answer,
        );
        return answer.started;
      } catch (error) {
        // A refused URL fails the promise, as it did when this was `async`.
        return Promise.reject(error);
      }
    },
    getJson: (url: string, headers: Record<string, string>, timeoutMs: number) =>
      getProviderJson(agent, url, headers, { timeoutMs, guard: options.guard, maxBytes: options.maxBodyBytes }),
    close: () => agent.close(),
  };
}

export type Upstream = ReturnType<typeof createUpstream>;

/** Errors worth trying another endpoint for: the connection, not the request, failed. */
export function isTimeout(error: unknown): boolean {
  const code = (error as { code?: string })?.code ?? '';
  const name = (error as { name?: string })?.name ?? '';
  return code.includes('TIMEOUT') || name === 'TimeoutError';
}
