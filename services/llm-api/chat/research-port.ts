import { ApiError, createInternalClient, sseData, type CancelSignal, type InternalClient, type Principal } from '../../kit/index.js';

/**
 * Deep research runs on response-api's tool loop: `POST /v1/responses` with `stream: true`, called
 * service to service (its internal address, the caller's identity and the gateway token; never the
 * public edge, so it does not spend the caller's edge rate limit). llm-api does not import
 * response-api's code; it reads the Responses event stream, as any client would.
 */
export interface ResponsesEvent {
  type: string;
  [field: string]: any;
}

export interface ResearchPort {
  /**
   * Starts the response and resolves once response-api accepted it (a refusal is thrown as an
   * ApiError before anything was sent to the client); then yields its events as they arrive.
   */
  run(principal: Principal, body: Record<string, unknown>, options: { requestId: string; signal: CancelSignal }): Promise<AsyncIterable<ResponsesEvent>>;
}

export function createResearchPort(options: { baseUrl: () => string; gatewayToken: string; maxEventBytes: number }): ResearchPort & { close(): Promise<void> } {
  // response-api's address is known only once it listens (port 0 in tests): the client is made on first use.
  let current: { url: string; client: InternalClient } | null = null;
  const client = () => {
    const url = options.baseUrl();
    if (!current || current.url !== url) {
      void current?.client.close();
      current = { url, client: createInternalClient({ baseUrl: url, gatewayToken: options.gatewayToken }) };
    }
    return current.client;
  };

  return {
    async run(principal, body, { requestId, signal }) {
      // No timeout between events: each step and each tool call is bounded by response-api itself.
      const res = await client().open('POST', '/v1/responses', { principal, body: { ...body, stream: true }, requestId, signal, timeoutMs: 0 });
      if (res.status !== 200) {
        const text = await res.body.text().catch(() => '');
        let error: any;
        try {
          error = JSON.parse(text)?.error;
        } catch {
          error = undefined;
        }
        const message = typeof error?.message === 'string' ? error.message : `The research could not start (${res.status})`;
        if (res.status >= 400 && res.status < 500) throw new ApiError(res.status, message, { code: error?.code, param: 'deep_research' });
        throw new ApiError(502, message, { code: 'upstream_error' });
      }
      return parseEvents(res.body, options.maxEventBytes);
    },
    async close() {
      await current?.client.close();
    },
  };
}

/** `event: <type>` / `data: <json>` blocks → the parsed `data` objects. */
async function* parseEvents(body: AsyncIterable<Uint8Array>, maxEventBytes: number): AsyncGenerator<ResponsesEvent> {
  for await (const data of sseData(body, maxEventBytes)) yield JSON.parse(data) as ResponsesEvent;
}
