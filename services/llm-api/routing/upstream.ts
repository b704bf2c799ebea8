import { Agent, request, type Dispatcher } from 'undici';

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
}

export type UpstreamResponse = Dispatcher.ResponseData;

/** `https://host/v1/` + `chat/completions` → `https://host/v1/chat/completions`. */
export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}

export function authHeaders(apiKey: string | null): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {};
}

export function createUpstream(options: UpstreamOptions) {
  const agent = new Agent({
    connections: options.connections,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 600_000,
    connect: { timeout: options.connectTimeoutMs },
    headersTimeout: options.headersTimeoutMs,
    bodyTimeout: options.bodyTimeoutMs,
  });

  return {
    agent,
    postJson(url: string, body: string, headers: Record<string, string>, signal?: AbortSignal): Promise<UpstreamResponse> {
      return request(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body,
        dispatcher: agent,
        signal,
      });
    },
    async getJson(url: string, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; body: unknown }> {
      const res = await request(url, {
        method: 'GET',
        headers: { accept: 'application/json', ...headers },
        dispatcher: agent,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.body.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // leave as text
      }
      return { status: res.statusCode, body };
    },
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
