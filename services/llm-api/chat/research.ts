import { ApiError, badRequest, completionId, contentText, errorBody, unixSeconds, type CancelSignal, type Clock, type Principal } from '../../kit/index.js';
import { ClientClosed } from '../routing/failover.js';
import type { ResearchPort, ResponsesEvent } from './research-port.js';
import type { ChatRequest } from './schemas.js';
import type { StoredAnswer } from './completions.js';
import { storeFailure, type StreamEvent, type StreamOutcome } from './stream.js';
import type { ChatCompletion, ChatCompletionChunk, ConversationRef, Usage } from './types.js';

/**
 * `deep_research: true` on chat completions: the Response API's tool loop runs with a research
 * instruction and the `google_search` and `scrape` tools (up to 8 steps; the first step must call
 * a tool; the last may not call one, so it answers), and its result comes back as a chat completion. What the loop does (the model's plans,
 * each search, each page read, each failure) is the answer's `reasoning_content`: streamed as it
 * happens, or whole in the JSON answer. The answer cites the pages it read as URLs: when the
 * model's text cites none of them, a "Sources" list of the pages read is appended, and every cited
 * page read is a `url_citation` annotation of the message.
 *
 * Usage is recorded by each step's own chat completion (the loop asks llm-api service to service),
 * so this request records none of its own; its `usage` is the sum over the steps. A request made in
 * a project hands the project to the loop (`ResearchInput.projectId`), so each step is made in it:
 * its usage is the project's and llm-api gives it the project's instruction.
 */
export const RESEARCH_TOOLS = ['google_search', 'scrape'] as const;
export const RESEARCH_MAX_STEPS = 8;
export const RESEARCH_INSTRUCTIONS = [
  'You are a research assistant with web access. Research the question before answering:',
  '1. Plan the searches you need and say so briefly.',
  '2. Call google_search for each query, then call scrape on the most relevant results to read them; search again when something is missing.',
  '3. Answer from what you read. Cite every source as its full URL (inline, or in a "Sources" list at the end). Never cite a page you did not read.',
].join('\n');

type Message = ChatRequest['messages'][number];

export interface ResearchDeps {
  port: ResearchPort;
  clock: Clock;
}

export interface ResearchInput {
  request: ChatRequest;
  /**
   * The conversation's history and the request's messages, without the project's instruction: each
   * step gets that from llm-api itself (it is made in `projectId`), so it is sent once, not twice.
   */
  messages: Message[];
  /** The caller's project the request is made in (checked to be theirs); absent or null: none. */
  projectId?: string | null;
  requestId: string;
  conversation?: ConversationRef;
  /**
   * Stores the exchange in the conversation (`store: true`): before the JSON answer is returned, or
   * before a stream's `done` (a failure ends the stream with an error event instead).
   */
  finish?: (answer: StoredAnswer) => Promise<void>;
}

export type ResearchResult = { kind: 'json'; body: ChatCompletion } | { kind: 'stream'; events: AsyncIterable<StreamEvent>; done: Promise<StreamOutcome> };

/** The smallest token budget a research run accepts (response-api's floor for `max_output_tokens`). */
const RESEARCH_MIN_TOKENS = 16;

export async function deepResearch(deps: ResearchDeps, principal: Principal, input: ResearchInput, signal: CancelSignal): Promise<ResearchResult> {
  const { request } = input;
  const body: Record<string, unknown> = {
    model: request.model,
    instructions: RESEARCH_INSTRUCTIONS,
    input: toResponsesInput(input.messages),
    tools: [...RESEARCH_TOOLS],
    tool_choice: 'required',
    max_steps: RESEARCH_MAX_STEPS,
    // A model still searching at the last step answers from what it read, rather than not at all.
    answer_on_last_step: true,
    store: false,
  };
  if (typeof request.temperature === 'number') body.temperature = request.temperature;
  if (typeof request.top_p === 'number') body.top_p = request.top_p;
  const maxTokens = request.max_completion_tokens ?? request.max_tokens;
  if (typeof maxTokens === 'number') {
    // The loop's steps take at least RESEARCH_MIN_TOKENS (response-api's floor for max_output_tokens):
    // refused here naming the caller's field, not as response-api's refusal of a field it never sent.
    if (maxTokens < RESEARCH_MIN_TOKENS) {
      const field = request.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
      throw badRequest(`deep_research needs ${field} of at least ${RESEARCH_MIN_TOKENS}`, field);
    }
    body.max_output_tokens = maxTokens;
  }

  let events: AsyncIterable<ResponsesEvent>;
  try {
    events = await deps.port.run(principal, body, { requestId: input.requestId, signal, projectId: input.projectId });
  } catch (error) {
    if (signal.aborted) throw new ClientClosed();
    throw error;
  }
  const meta = { id: completionId(), created: unixSeconds(deps.clock), model: request.model };
  const progress = new ResearchProgress();

  if (!request.stream) {
    let answer: ResearchAnswer;
    try {
      for await (const event of events) progress.read(event);
      answer = progress.answer();
    } catch (error) {
      if (signal.aborted) throw new ClientClosed();
      throw error instanceof ApiError ? error : new ApiError(502, 'The research stream broke off', { cause: error });
    }
    if (answer.error) throw new ApiError(answer.error.status, answer.error.message, { code: answer.error.code });
    await input.finish?.(storedAnswer(request, progress, answer));
    return {
      kind: 'json',
      body: {
        ...meta,
        object: 'chat.completion',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: answer.content, refusal: null, reasoning_content: progress.reasoning, annotations: answer.annotations },
            logprobs: null,
            finish_reason: answer.finishReason,
          },
        ],
        usage: answer.usage,
        ...(input.conversation ? { conversation: input.conversation } : {}),
      },
    };
  }

  const outcome: StreamOutcome = { outcome: 'ok', usage: null, content: '', reasoning: '', toolCalls: null, finishReason: null, relayedChars: 0, relayedReasoningChars: 0 };
  let settle!: (value: StreamOutcome) => void;
  const done = new Promise<StreamOutcome>((resolve) => (settle = resolve));
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null, extra: Record<string, unknown> = {}): StreamEvent => ({
    type: 'chunk',
    chunk: { ...meta, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }], ...extra } as ChatCompletionChunk,
  });
  async function* run(): AsyncGenerator<StreamEvent> {
    try {
      yield chunk({ role: 'assistant', content: '' }, null, input.conversation ? { conversation: input.conversation } : {});
      try {
        for await (const event of events) {
          const text = progress.read(event);
          if (text) yield chunk({ reasoning_content: text });
        }
      } catch (error) {
        if (signal.aborted) {
          outcome.outcome = 'client_closed';
          return;
        }
        outcome.outcome = 'stream_error';
        yield { type: 'error', error: errorBody(502, 'The research stream broke off', { requestId: input.requestId }).error as any };
        return;
      }
      const answer = progress.answer();
      if (answer.error) {
        outcome.outcome = 'stream_error';
        yield { type: 'error', error: errorBody(answer.error.status, answer.error.message, { code: answer.error.code, requestId: input.requestId }).error as any };
        return;
      }
      Object.assign(outcome, { usage: answer.usage, content: answer.content, reasoning: progress.reasoning, finishReason: answer.finishReason });
      yield chunk({ content: answer.content });
      yield chunk({}, answer.finishReason);
      if (request.stream_options?.include_usage) yield { type: 'chunk', chunk: { ...meta, object: 'chat.completion.chunk', choices: [], usage: answer.usage } };
      // Stored before `done`: the route stops reading at `done`, so nothing after it would run.
      if (input.finish) {
        try {
          await input.finish(storedAnswer(request, progress, answer));
        } catch (error) {
          yield storeFailure(error, input.requestId);
          return;
        }
      }
      yield { type: 'done' };
    } finally {
      if (outcome.outcome === 'ok' && signal.aborted) outcome.outcome = 'client_closed';
      settle(outcome);
    }
  }
  return { kind: 'stream', events: run(), done };
}

function storedAnswer(request: ChatRequest, progress: ResearchProgress, answer: ResearchAnswer): StoredAnswer {
  return {
    content: answer.content,
    reasoning: request.store_reasoning ? progress.reasoning : '',
    toolCalls: null,
    status: answer.finishReason === 'stop' ? 'completed' : 'incomplete',
    model: request.model,
    usage: answer.usage,
  };
}

/** Chat messages → Responses input items (text and image parts, tool calls and their outputs). */
export function toResponsesInput(messages: Message[]): Array<Record<string, unknown>> {
  const items: Array<Record<string, unknown>> = [];
  for (const message of messages as Array<Record<string, any>>) {
    const role = message.role === 'function' ? 'tool' : message.role;
    if (role === 'tool') {
      items.push({ type: 'function_call_output', call_id: String(message.tool_call_id ?? ''), output: contentText(message.content) });
      continue;
    }
    if (role === 'assistant') {
      const text = contentText(message.content);
      if (text) items.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] });
      for (const call of message.tool_calls ?? []) {
        // A custom tool's call (free text in) goes to the tool loop as a function call taking `{input}`:
        // Responses input has no form the loop's chat steps could send on for it.
        if (call.type === 'custom') items.push({ type: 'function_call', call_id: call.id, name: call.custom?.name, arguments: JSON.stringify({ input: String(call.custom?.input ?? '') }) });
        else items.push({ type: 'function_call', call_id: call.id, name: call.function?.name, arguments: call.function?.arguments ?? '{}' });
      }
      continue;
    }
    const content = typeof message.content === 'string' ? [{ type: 'input_text', text: message.content }] : (message.content ?? []).map(inputPart);
    items.push({ type: 'message', role, content });
  }
  return items;
}

function inputPart(part: Record<string, any>): Record<string, unknown> {
  if (part?.type === 'image_url') {
    const url = typeof part.image_url === 'string' ? part.image_url : part.image_url?.url;
    return { type: 'input_image', image_url: url, ...(part.image_url?.detail ? { detail: part.image_url.detail } : {}) };
  }
  return { type: 'input_text', text: typeof part?.text === 'string' ? part.text : '' };
}

export interface ResearchAnswer {
  content: string;
  finishReason: 'stop' | 'length' | 'content_filter';
  usage: Usage | null;
  annotations: Array<{ type: 'url_citation'; url_citation: { url: string; title: string; start_index: number; end_index: number } }>;
  error: { status: number; code?: string; message: string } | null;
}

/**
 * Reads the Responses events of the research loop: turns each into a line of progress for the
 * client, remembers the pages read, and, at the terminal event, builds the answer.
 */
export class ResearchProgress {
  /** Everything reported so far (the JSON answer's `reasoning_content`). */
  reasoning = '';
  /** Pages read successfully, in order. */
  readonly sources: Array<{ url: string; title: string }> = [];
  private readonly calls = new Map<string, { name: string; arguments: Record<string, any> }>();
  private readonly texts = new Map<string, string>();
  /** The latest message: a plan when tool calls follow it, the answer when the response ends. */
  private lastMessage: string | null = null;
  private final: Record<string, any> | null = null;

  /** One event → the progress text it adds ('' for none). */
  read(event: ResponsesEvent): string {
    const text = this.describe(event);
    this.reasoning += text;
    return text;
  }

  private describe(event: ResponsesEvent): string {
    switch (event.type) {
      case 'response.created':
        return 'Planning the research.\n';
      case 'response.output_item.added': {
        const item = event.item ?? {};
        if (item.type === 'message') this.texts.set(item.id, '');
        if (item.type !== 'mcp_call') return '';
        this.calls.set(item.id, { name: item.name, arguments: {} });
        // A message followed by tool calls was the model's plan, not its answer.
        const plan = this.lastMessage;
        this.lastMessage = null;
        return plan?.trim() ? `${plan.trim()}\n` : '';
      }
      case 'response.output_text.delta':
        if (this.texts.has(event.item_id)) this.texts.set(event.item_id, this.texts.get(event.item_id)! + String(event.delta ?? ''));
        return '';
      case 'response.mcp_call_arguments.done': {
        const call = this.calls.get(event.item_id);
        if (!call) return '';
        call.arguments = parseObject(event.arguments);
        if (call.name === 'google_search') return `Searching the web for "${String(call.arguments.q ?? '')}".\n`;
        if (call.name === 'scrape') return `Reading ${String(call.arguments.url ?? '')}\n`;
        return `Calling ${call.name}.\n`;
      }
      case 'response.output_item.done': {
        const item = event.item ?? {};
        if (item.type === 'message') {
          this.lastMessage = this.texts.get(item.id) ?? '';
          return '';
        }
        if (item.type !== 'mcp_call') return '';
        const call = this.calls.get(item.id);
        if (item.status === 'failed') return `  ${call?.name ?? item.name} failed: ${String(item.error ?? 'unknown error')}\n`;
        if (item.name === 'google_search') {
          const found = String(item.output ?? '').match(/^\[\d+\]/gm)?.length ?? 0;
          return `  ${found} result${found === 1 ? '' : 's'}.\n`;
        }
        if (item.name === 'scrape' && typeof call?.arguments.url === 'string') {
          const title = /^# (.+)$/m.exec(String(item.output ?? ''))?.[1]?.trim() ?? '';
          if (!this.sources.some((s) => s.url === call.arguments.url)) this.sources.push({ url: call.arguments.url, title });
          return `  Read${title ? ` "${title}"` : ''}.\n`;
        }
        return '';
      }
      case 'response.completed':
      case 'response.incomplete':
      case 'response.failed':
        this.final = event.response ?? {};
        return event.type === 'response.failed' ? '' : `Research finished; writing the answer.\n`;
      case 'error':
        this.final = { status: 'failed', error: { code: event.code, message: event.message } };
        return '';
      default:
        return '';
    }
  }

  answer(): ResearchAnswer {
    const response = this.final;
    const empty = { content: '', finishReason: 'stop' as const, usage: null, annotations: [] };
    if (!response) return { ...empty, error: { status: 502, message: 'The research ended without a result' } };
    if (response.status === 'failed' || response.status === 'cancelled') {
      const code = response.error?.code;
      const status = code === 'rate_limit_exceeded' ? 429 : 502;
      return { ...empty, error: { status, code: status === 429 ? code : 'upstream_error', message: String(response.error?.message ?? 'The research failed') } };
    }
    const output: Array<Record<string, any>> = response.output ?? [];
    const last = output.at(-1);
    let content = last?.type === 'message' ? (this.lastMessage ?? contentText(last.content)) : '';
    if (!content.trim()) content = 'The research reached its step limit before an answer was written.';
    if (this.sources.length > 0 && !this.sources.some((s) => content.includes(s.url))) {
      content += `\n\nSources:\n${this.sources.map((s) => `- ${s.title ? `${s.title}: ` : ''}${s.url}`).join('\n')}`;
    }
    const annotations: ResearchAnswer['annotations'] = [];
    for (const source of this.sources) {
      for (let at = content.indexOf(source.url); at >= 0; at = content.indexOf(source.url, at + source.url.length)) {
        annotations.push({ type: 'url_citation', url_citation: { url: source.url, title: source.title, start_index: at, end_index: at + source.url.length } });
      }
    }
    annotations.sort((a, b) => a.url_citation.start_index - b.url_citation.start_index);
    const u = response.usage;
    const usage: Usage | null = u
      ? {
          prompt_tokens: u.input_tokens ?? 0,
          completion_tokens: u.output_tokens ?? 0,
          total_tokens: (u.input_tokens ?? 0) + (u.output_tokens ?? 0),
          completion_tokens_details: { reasoning_tokens: u.output_tokens_details?.reasoning_tokens ?? 0 },
        }
      : null;
    // Incomplete by the provider's content filter, or at a limit (tokens, steps): chat's two reasons.
    const finishReason = response.status !== 'incomplete' ? 'stop' : response.incomplete_details?.reason === 'content_filter' ? 'content_filter' : 'length';
    return { content, finishReason, usage, annotations, error: null };
  }
}

function parseObject(text: unknown): Record<string, any> {
  try {
    const value = JSON.parse(String(text ?? '{}'));
    return value && typeof value === 'object' && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}
