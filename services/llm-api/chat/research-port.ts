import { createInternalClient, PROJECT_HEADER, relayError, sseData, type CancelSignal, type Principal } from '../../kit/index.js';

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
   * `projectId`: the project the research is made in, sent as `X-Gateway-Project-ID` (response-api
   * makes every step in it, so each step's usage is the project's and gets its instruction).
   */
  run(principal: Principal, body: Record<string, unknown>, options: { requestId: string; signal: CancelSignal; projectId?: string | null }): Promise<AsyncIterable<ResponsesEvent>>;
}

/**
 * The largest event read from response-api. Not the providers' `LLM_SSE_MAX_EVENT_BYTES`: this
 * stream is the platform's own, and its terminal event carries the whole response, every page the
 * research read included (a few dozen long pages pass a megabyte), after every step has run and been
 * paid for. The bound only stops a runaway.
 */
export const RESEARCH_MAX_EVENT_BYTES = 64 * 1024 * 1024;

export function createResearchPort(options: { baseUrl: () => string; gatewayToken: string; maxEventBytes?: number }): ResearchPort & { close(): Promise<void> } {
  const maxEventBytes = options.maxEventBytes ?? RESEARCH_MAX_EVENT_BYTES;
  const client = createInternalClient({ baseUrl: options.baseUrl, gatewayToken: options.gatewayToken });
  return {
    async run(principal, body, { requestId, signal, projectId }) {
      const headers = projectId ? { [PROJECT_HEADER]: projectId } : undefined;
      // No timeout between events: each step and each tool call is bounded by response-api itself.
      const res = await client.open('POST', '/v1/responses', { principal, body: { ...body, stream: true }, requestId, signal, timeoutMs: 0, headers });
      if (res.status !== 200) relayError({ ...res, body: await res.body.text().catch(() => '') }, { what: 'Starting the research', param: 'deep_research' });
      return parseEvents(res.body, maxEventBytes);
    },
    close: () => client.close(),
  };
}

/** `event: <type>` / `data: <json>` blocks → the parsed `data` objects. */
async function* parseEvents(body: AsyncIterable<Uint8Array>, maxEventBytes: number): AsyncGenerator<ResponsesEvent> {
  for await (const data of sseData(body, maxEventBytes)) yield JSON.parse(data) as ResponsesEvent;
}
