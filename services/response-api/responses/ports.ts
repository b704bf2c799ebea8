import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import {
  ApiError,
  collectToolCallDelta,
  containsMediaId,
  createInternalClient,
  GATEWAY_TOKEN_HEADER,
  identityHeadersFor,
  PROJECT_HEADER,
  relayError,
  resolveMediaReferences,
  sseData,
  type Clock,
  type Principal,
  type StreamedToolCall,
} from '../../kit/index.js';
import { toConversationItem } from './items.js';

/**
 * What the loop needs from the other services, both reached directly at their internal address
 * with the caller's identity and the gateway token (never through the public edge, so internal
 * steps do not spend the caller's edge rate limit; llm-api still records each step's usage).
 */
export interface ChatCompletion {
  choices: Array<{ message: ChatCompletionMessage; finish_reason: string | null }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number; prompt_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number }; completion_tokens_details?: { reasoning_tokens?: number } };
}

/** What answered a turn: the response's `model` and `usage` (the sum of its steps'; null when none was reported). */
export interface TurnAnswer {
  model: string;
  usage?: { input_tokens: number; output_tokens: number } | null;
  /**
   * Index of the first output item among the turn's items (the number of input items): the usage
   * goes on the output's last assistant message, never on one of the input, so a turn whose output
   * has none (it ends in a client `function_call`) reports it on no event. Absent: 0.
   */
  answerFrom?: number;
}

/** A step's answer: its text, its refusal (OpenAI's structured refusal, instead of or beside the text), its tool calls. */
export interface ChatCompletionMessage {
  content?: string | null;
  refusal?: string | null;
  tool_calls?: Array<{ id: string; type?: string; function: { name: string; arguments: string } }>;
}

export interface LlmPort {
  /**
   * One step's chat completion. With `onDelta` it is streamed from llm-api and each piece of its
   * text and of its refusal is handed over as it arrives; the result is the same completion either way.
   */
  complete(principal: Principal, body: Record<string, unknown>, signal: AbortSignal, onDelta?: StepDeltas, projectId?: string | null): Promise<ChatCompletion>;
  /**
   * The project of a conversation of the caller (llm-api's conversation object), or null: none, or
   * the conversation is gone (404). Each step is then made in it (`complete`'s `projectId`, sent as
   * `X-Gateway-Project-ID`): llm-api prepends its instruction and attributes the usage to it.
   * Absent (a test's or a benchmark's port): responses are made in no project.
   */
  conversationProject?(principal: Principal, conversationId: string, signal: AbortSignal): Promise<string | null>;
  /**
   * Appends a turn's stored items (input and output) to a conversation of the caller (llm-api's
   * conversation store), each converted to the shape the store takes (`toConversationItem`), in
   * one request to llm-api's internal turn route and so in one transaction: the turn is written
   * whole or not at all, however many items it has (up to llm-api's limit of 2000 per turn; a
   * longer one is refused whole). `answer` is the response's model and summed usage, which the
   * turn's `message.sent` events carry as a chat turn's do (absent: null in the events).
   */
  appendConversationItems(principal: Principal, conversationId: string, items: Array<Record<string, any>>, answer?: TurnAnswer): Promise<void>;
  /**
   * A conversation's items, newest first, read page by page as the caller iterates: leaving the
   * loop early reads no further page.
   */
  conversationHistory(principal: Principal, conversationId: string): AsyncIterable<Record<string, any>>;
  /** The context window llm-api fits requests to the model to; null when it does not know one. */
  contextLength(principal: Principal, model: string, signal: AbortSignal): Promise<number | null>;
}

/** Where a streamed step's pieces go as they arrive: its text and its refusal. */
export interface StepDeltas {
  text(delta: string): void;
  refusal(delta: string): void;
  /** A promise while the streaming caller's connection is full: no more of the step is read from llm-api until it settles. */
  drained?(): Promise<void> | null;
}

export interface ToolDescription {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  /** The tool says it changes nothing (MCP's `readOnlyHint`): what an `allowed_tools` filter's `read_only` matches. */
  readOnly?: boolean;
}

export interface ToolSession {
  list(): Promise<ToolDescription[]>;
  call(name: string, args: Record<string, unknown>, options: { signal: AbortSignal; timeoutMs: number }): Promise<{ output: string; isError: boolean }>;
  close(): Promise<void>;
}

export interface ToolsPort {
  open(principal: Principal, signal: AbortSignal): Promise<ToolSession>;
}

/**
 * llm-api already bounds each provider event (`LLM_SSE_MAX_EVENT_BYTES`) before relaying it; this
 * only keeps a misbehaving peer from growing one event without end.
 */
const MAX_STEP_EVENT_BYTES = 16 * 1024 * 1024;

/**
 * A streamed chat completion read into the completion it stands for: the pieces of its text and of
 * its refusal handed to `onDelta` as they arrive, tool calls assembled from their deltas by the
 * kit's rule (`collectToolCallDelta`, as llm-api assembles them), the finish reason and the usage of
 * the last chunk. An error event (llm-api's, after the stream started) or a stream that ends without
 * `[DONE]` fails the step. While the streaming caller's connection is full (`onDelta.drained`),
 * nothing more is read (so llm-api, and the provider behind it, are not read either) until it
 * drains or the step is aborted.
 */
async function collectStream(body: AsyncIterable<Uint8Array>, onDelta: StepDeltas, signal: AbortSignal): Promise<ChatCompletion> {
  let content = '';
  let refusal = '';
  let calls: StreamedToolCall[] | null = null;
  let finishReason: string | null = null;
  let usage: ChatCompletion['usage'];
  for await (const data of sseData(body, MAX_STEP_EVENT_BYTES)) {
    if (data === '[DONE]') {
      const message: ChatCompletionMessage = { content, refusal: refusal || null };
      if (calls) message.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      return { choices: [{ message, finish_reason: finishReason }], ...(usage ? { usage } : {}) };
    }
    const chunk = JSON.parse(data);
    if (chunk.error) relayError({ status: 502, body: chunk }, { what: 'The chat completion' });
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    if (choice.finish_reason) finishReason = choice.finish_reason;
    const delta = choice.delta ?? {};
    if (typeof delta.content === 'string' && delta.content !== '') {
      content += delta.content;
      onDelta.text(delta.content);
    }
    if (typeof delta.refusal === 'string' && delta.refusal !== '') {
      refusal += delta.refusal;
      onDelta.refusal(delta.refusal);
    }
    if (Array.isArray(delta.tool_calls)) for (const piece of delta.tool_calls) calls = collectToolCallDelta(calls, piece);
    const full = onDelta.drained?.();
    if (full) {
      await drainedOrAborted(full, signal);
      // The rest of the step may be read already: an abort meanwhile still ends it here.
      if (signal.aborted) throw signal.reason;
    }
  }
  throw new ApiError(502, 'The chat completion ended before it was complete', { code: 'upstream_error' });
}

/** Waits for a full client connection to drain, or for the step to be aborted (a cancel must not wait for a stalled client). */
function drainedOrAborted(full: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      signal.removeEventListener('abort', done);
      resolve();
    };
    signal.addEventListener('abort', done, { once: true });
    void full.then(done);
  });
}

/**
 * A step llm-api refused, relayed. Its refusal of the model (`model_not_found`) names no field, since
 * the step's body is response-api's; the caller's field is the request's `model`.
 */
const STEP_REFUSAL = { what: 'The chat completion', paramOfCode: { model_not_found: 'model' } } as const;

/** The most (caller, model) context windows one process keeps. */
const MODEL_CACHE_ENTRIES = 10_000;

export function createLlmPort(options: { baseUrl: () => string; gatewayToken: string; timeoutMs: number; clock: Clock; modelCacheMs: number }): LlmPort & { close(): Promise<void> } {
  const client = createInternalClient({ baseUrl: options.baseUrl, gatewayToken: options.gatewayToken, timeoutMs: options.timeoutMs });
  // Context windows by caller and model, each reused for `modelCacheMs`. The lookup is also the
  // caller's access check (llm-api answers 404 for a model outside the user's or key's allow-list,
  // or one it does not serve them), so an entry one caller's lookup made must never answer another
  // caller. Only lookups that succeed are kept, expired entries are dropped as new ones come, and
  // the map holds at most MODEL_CACHE_ENTRIES (the oldest go first).
  const contextLengths = new Map<string, { value: number | null; expires: number }>();
  return {
    async complete(principal, body, signal, onDelta, projectId) {
      const headers = projectId ? { [PROJECT_HEADER]: projectId } : undefined;
      if (!onDelta) {
        const res = await client.call<any>('POST', '/v1/chat/completions', { principal, body: { ...body, stream: false }, signal, headers });
        if (res.status !== 200) relayError(res, STEP_REFUSAL);
        return res.body as ChatCompletion;
      }
      const res = await client.open('POST', '/v1/chat/completions', { principal, body: { ...body, stream: true, stream_options: { include_usage: true } }, signal, headers });
      if (res.status !== 200) relayError({ ...res, body: await res.body.text().catch(() => '') }, STEP_REFUSAL);
      try {
        return await collectStream(res.body, onDelta, signal);
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        throw error instanceof ApiError ? error : new ApiError(502, 'The chat completion stream broke off', { code: 'upstream_error', cause: error });
      }
    },
    async appendConversationItems(principal, conversationId, stored, answer) {
      const items = stored.map(toConversationItem);
      if (items.length === 0) return;
      // llm-api's internal route, not the public one (20 items per request): the whole turn in one
      // request, so in one transaction. Internal routes refuse edge identity headers, so the
      // caller is named in the body instead. The usage goes in the chat form the store reports
      // (`message.sent.tokens_used`): prompt and completion tokens.
      const path = `/internal/conversations/${encodeURIComponent(conversationId)}/items`;
      const usage = answer?.usage;
      const turn = answer
        ? { model: answer.model, tokens_used: usage ? { prompt: usage.input_tokens, completion: usage.output_tokens } : null, ...(answer.answerFrom !== undefined ? { answer_from: answer.answerFrom } : {}) }
        : {};
      // The answer is a small summary (count, first and last id), read by nothing here.
      const res = await client.call<unknown>('POST', path, { body: { user_id: principal.userId, items, ...turn } });
      if (res.status !== 200) relayError(res, { what: 'Writing conversation items' });
    },
    async conversationProject(principal, conversationId, signal) {
      const res = await client.call<any>('GET', `/v1/conversations/${encodeURIComponent(conversationId)}`, { principal, signal });
      if (res.status === 404) return null;
      if (res.status !== 200) relayError(res, { what: 'Reading the conversation', ...(res.status < 500 ? { param: 'conversation' } : {}) });
      return typeof res.body.project_id === 'string' ? res.body.project_id : null;
    },
    async *conversationHistory(principal, conversationId) {
      // Newest first, continuing after the last item read: an item appended meanwhile is not seen
      // and does not shift the pages. 100 is the most the items API gives per page.
      let after: string | undefined;
      for (;;) {
        const query = `limit=100&order=desc${after ? `&after=${encodeURIComponent(after)}` : ''}`;
        const res = await client.call<any>('GET', `/v1/conversations/${encodeURIComponent(conversationId)}/items?${query}`, { principal });
        // A conversation that is not the caller's (or does not exist) is the request's `conversation`.
        if (res.status !== 200) relayError(res, { what: 'Reading the conversation', ...(res.status < 500 ? { param: 'conversation' } : {}) });
        yield* res.body.data as Array<Record<string, any>>;
        if (!res.body.has_more || res.body.data.length === 0) return;
        after = res.body.last_id;
      }
    },
    async contextLength(principal, model, signal) {
      const key = `${principal.userId}\u0000${principal.apiKeyId ?? ''}\u0000${model}`;
      const cached = contextLengths.get(key);
      if (cached && cached.expires > options.clock.now()) return cached.value;
      // Model ids may hold slashes, which the route takes as they are.
      const path = model.split('/').map(encodeURIComponent).join('/');
      const res = await client.call<any>('GET', `/v1/models/${path}`, { principal, signal });
      if (res.status !== 200) relayError(res, { what: 'Reading the model', ...(res.status < 500 ? { param: 'model' } : {}) });
      const value = typeof res.body.context_length === 'number' ? res.body.context_length : null;
      if (options.modelCacheMs > 0) {
        const now = options.clock.now();
        contextLengths.delete(key);
        for (const [k, entry] of contextLengths) {
          if (entry.expires > now && contextLengths.size < MODEL_CACHE_ENTRIES) break;
          contextLengths.delete(k);
        }
        contextLengths.set(key, { value, expires: now + options.modelCacheMs });
      }
      return value;
    },
    close: () => client.close(),
  };
}

/**
 * MCP client sessions to mcp-tools' `/v1/mcp` (stateless: each call is its own HTTP request).
 *
 * The tool list is the same for every caller (mcp-tools filters it only by the administrator's
 * switches), so one copy is reused for `listCacheMs` across responses; and a session connects
 * (`initialize`) only when it first needs mcp-tools: a response whose model answers without calling
 * a tool, with the list cached, costs mcp-tools no request at all.
 */
export function createToolsPort(options: { baseUrl: () => string; gatewayToken: string; clock: Clock; listCacheMs: number }): ToolsPort {
  let cachedList: { tools: ToolDescription[]; expires: number } | null = null;
  return {
    async open(principal, openSignal) {
      /** A connection, its tool calls in flight, and whether later calls must connect anew (`retire`). */
      type Connection = { client: Client; transport: StreamableHTTPClientTransport; calls: number; retired: boolean };
      let connecting: Promise<Connection> | null = null;
      /** What `connecting` resolved to. */
      let connected: Connection | null = null;
      const connect = (signal: AbortSignal, timeoutMs: number) => {
        if (connecting) return connecting;
        const attempt = (async () => {
          const headers = { [GATEWAY_TOKEN_HEADER]: options.gatewayToken, ...identityHeadersFor(principal) };
          const transport = new StreamableHTTPClientTransport(new URL('/v1/mcp', options.baseUrl()), { requestInit: { headers } });
          const client = new Client({ name: 'response-api', version: '1.0.0' });
          await connectWithin(client, transport, signal, timeoutMs);
          return { client, transport, calls: 0, retired: false } as Connection;
        })();
        // Before any caller's continuation (reactions run in the order they were added).
        attempt.then(
          (connection) => void (connecting === attempt && (connected = connection)),
          () => {},
        );
        // A failed connect is not kept: the response's next tool call tries again.
        attempt.catch(() => {
          if (connecting === attempt) connecting = null;
        });
        return (connecting = attempt);
      };
      /**
       * A call past its timeout: the SDK gives up on it, but its HTTP request to mcp-tools (and the
       * tool with it, a python_exec sandbox say) runs on, since only closing the transport ends a
       * request, and that ends every request of the connection. The connection is therefore retired:
       * later calls connect anew, and it is closed once its other calls are done, which ends the
       * request and mcp-tools stops the tool (rather than when the response ends).
       */
      const retire = (connection: Connection) => {
        connection.retired = true;
        if (connected === connection) {
          connected = null;
          connecting = null;
        }
      };
      return {
        async list() {
          if (cachedList && cachedList.expires > options.clock.now()) return cachedList.tools;
          const { client } = await connect(openSignal, DEFAULT_REQUEST_TIMEOUT_MSEC);
          const tools: ToolDescription[] = [];
          let cursor: string | undefined;
          do {
            const page = await client.listTools(cursor ? { cursor } : {}, { signal: openSignal });
            tools.push(...page.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema as Record<string, unknown>, readOnly: t.annotations?.readOnlyHint === true })));
            cursor = page.nextCursor;
          } while (cursor);
          if (options.listCacheMs > 0) cachedList = { tools, expires: options.clock.now() + options.listCacheMs };
          return tools;
        },
        async call(name, args, { signal: callSignal, timeoutMs }) {
          // The MCP SDK never removes the abort listener it adds to a request's signal, so each call
          // gets a signal of its own that follows the response's only while the call runs: the
          // response's signal (one per response, shared by all its calls) would otherwise collect a
          // listener per call, and a cancel would then send a `notifications/cancelled` to mcp-tools
          // for every call that had already finished.
          const own = new AbortController();
          // The server is stateless, so a `notifications/cancelled` cannot reach the running call:
          // closing the transport aborts its HTTP request, and mcp-tools stops the tool when its client leaves.
          let connection: Connection | null = null;
          const stop = () => {
            own.abort(callSignal.reason);
            void connection?.transport.close().catch(() => {});
          };
          if (callSignal.aborted) stop();
          else callSignal.addEventListener('abort', stop, { once: true });
          let result;
          try {
            connection = await connect(own.signal, timeoutMs);
            own.signal.throwIfAborted();
            const used = connection;
            used.calls++;
            try {
              result = await used.client.callTool({ name, arguments: args }, undefined, { signal: own.signal, timeout: timeoutMs });
            } catch (error) {
              if ((error as { code?: unknown }).code === ErrorCode.RequestTimeout) retire(used);
              throw error;
            } finally {
              used.calls--;
              if (used.retired && used.calls === 0) void used.client.close().catch(() => {});
            }
          } finally {
            callSignal.removeEventListener('abort', stop);
          }
          const content = Array.isArray(result.content) ? result.content : [];
          const text = content.map((part: any) => (part?.type === 'text' ? part.text : JSON.stringify(part))).join('\n');
          const output = text || (result.structuredContent ? JSON.stringify(result.structuredContent) : '');
          return { output, isError: result.isError === true };
        },
        async close() {
          const session = await connecting?.catch(() => null);
          await session?.client.close();
        },
      };
    },
  };
}

/**
 * Connects an MCP client within `timeoutMs` (a tool call's timeout: connecting is part of the call).
 * The MCP SDK bounds `initialize`, but not the `notifications/initialized` POST that follows it,
 * which a stalled mcp-tools could hold open for fetch's own five-minute header timeout. Past the
 * bound the transport is closed (which ends that request) and the attempt fails as a request
 * timeout, as a tool call past its timeout does.
 */
async function connectWithin(client: Client, transport: StreamableHTTPClientTransport, signal: AbortSignal, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new McpError(ErrorCode.RequestTimeout, `Connecting to mcp-tools did not finish within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([client.connect(transport, { signal, timeout: timeoutMs }), timedOut]);
  } catch (error) {
    await transport.close().catch(() => {});
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

export interface MediaPort {
  /**
   * Refuses the input when it names a `jan_` media id the caller does not own (404 naming it),
   * before the response is created. Each step's completion resolves the ids again (llm-api turns
   * them into download URLs as the caller), so the stored input keeps the ids, never expiring URLs.
   */
  checkReferences(principal: Principal, items: unknown[], signal: AbortSignal): Promise<void>;
}

/** media-api's `POST /v1/media/resolve`, asked as the caller (service to service); the URLs it answers are not kept. */
export function createMediaPort(options: { baseUrl: () => string; gatewayToken: string; timeoutMs: number }): MediaPort & { close(): Promise<void> } {
  const client = createInternalClient(options);
  return {
    async checkReferences(principal, items, signal) {
      if (containsMediaId(items)) await resolveMediaReferences(client, principal, items, { param: 'input', signal });
    },
    close: () => client.close(),
  };
}
