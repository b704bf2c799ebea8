import { ApiError, collectToolCallDelta, completionId, errorBody, isDependencyUnavailable, SseEventTooLarge, SseSplitter, type CancelSignal } from '../../kit/index.js';
import { ClientClosed } from '../routing/failover.js';
import type { BodyChunks } from '../routing/provider-answer.js';
import { cleanUsage, usageCopy, type InvalidCountLog } from '../usage/token-counts.js';
import type { AnswerToolCall, ChatCompletionChunk, ConversationRef, ErrorPayload, Usage } from './types.js';

/**
 * The streamed answer, as a sequence of events for the route to write. Upstream events pass through
 * as they arrive (a batch of events nobody needs to look at is one `raw` event, written as is).
 * Along the way it captures usage (always asked upstream), drops the usage-only chunk when the
 * client did not ask for it, collects the assistant text and tool calls for storage, and ends with
 * `done` (the route writes `data: [DONE]`), or with one `error` event (and no `[DONE]`) when the
 * upstream fails after the start, sends an error event of its own, sends an event over the size
 * limit, or runs past the deadline. The upstream's own error text never reaches the client: the
 * error event is ours, and the upstream's goes to `onUpstreamError` (the caller logs it, redacted).
 * With `save` (`store: true`) the exchange is stored before the stream's last event: `done` only
 * once it is stored, an `error` event instead when storing failed.
 */
export type StreamEvent =
  | { type: 'raw'; text: string }
  | { type: 'chunk'; chunk: ChatCompletionChunk }
  | { type: 'error'; error: ErrorPayload }
  | { type: 'done' };

export type StreamOutcomeKind = 'ok' | 'client_closed' | 'stream_error' | 'upstream_error_event' | 'event_too_large' | 'deadline';

export interface StreamOutcome {
  outcome: StreamOutcomeKind;
  usage: Usage | null;
  /** Assistant text of choice 0 (and reasoning, tool calls), collected only when `collect` is set. */
  content: string;
  reasoning: string;
  /** Choice 0's tool calls assembled from their deltas, in the order of their index; null when none. */
  toolCalls: StreamedToolCall[] | null;
  finishReason: string | null;
  /**
   * Characters of answer text relayed to the client, every choice (`content`, `refusal`, tool-call
   * `arguments`, `reasoning_content`, `reasoning`), counted always, as the decoded strings' lengths:
   * what the usage estimate reads when the provider reported no usage (docs/llm.md, "A stream
   * without the provider's usage report").
   */
  relayedChars: number;
  /** The part of `relayedChars` that was reasoning. */
  relayedReasoningChars: number;
}

/** A tool call assembled from its deltas (`index` is its place among the choice's calls). */
export interface StreamedToolCall extends AnswerToolCall {
  index: number;
}

/** A tool-call delta as providers send it: only `index` is required (openai-api.md 1.3). */
interface ToolCallDelta {
  index?: unknown;
  id?: unknown;
  function?: { name?: unknown; arguments?: unknown } | null;
  /** A custom tool's call: its name, and its free-form input in pieces. */
  custom?: { name?: unknown; input?: unknown } | null;
}

export interface RelayOptions {
  /** The provider's first body chunk (read before the client got its 200) and the rest. */
  firstChunk: Uint8Array;
  rest: BodyChunks;
  clientWantsUsage: boolean;
  collect: boolean;
  requestId: string;
  /** Merged into the first chunk that has a `choices` array. */
  firstChunkExtra?: { conversation: ConversationRef };
  maxEventBytes: number;
  /** Aborted with `ClientClosed` when the client leaves, or with an ApiError (504) at the deadline. */
  signal: CancelSignal;
  onUpstreamError(detail: string, kind: Exclude<StreamOutcomeKind, 'ok' | 'client_closed'>): void;
  /**
   * With `clientWantsUsage`: the usage a stream ends with when the provider reported none (it
   * ignored `stream_options`), sent as OpenAI sends it, a chunk with `choices: []` before `[DONE]`,
   * with the id, `created` and `model` of the provider's first chunk (else a new id and these).
   */
  usageFallback?: { usage(outcome: StreamOutcome): Usage; model: string; created: number };
  /** Where a usage count that is not a non-negative integer is logged, with `requestId` (taken as 0, or absent for reasoning tokens). */
  usageLog?: InvalidCountLog;
  /**
   * Stores the exchange (`store: true`; needs `collect`), once: before `done` (`complete`), before
   * the error event of a failed stream, or when the stream stops early (the client left). A
   * rejection turns `done` into an error event (the caller logs it).
   */
  save?: (outcome: StreamOutcome, complete: boolean) => Promise<void>;
}

/**
 * Whether a line of `text` starts as a field other than `data` does (`event`, `id`, `retry`). JSON
 * data holds no raw line break and the kit's splitter ends every line with LF, so only the first
 * character after each LF is looked at: a quarter of what a regular expression over the text costs.
 */
function hasOtherField(text: string): boolean {
  for (let at = -1; ; ) {
    const first = text.charCodeAt(at + 1);
    if (first === 101 || first === 105 || first === 114) return true; // e, i, r
    at = text.indexOf('\n', at + 1);
    if (at < 0) return false;
  }
}

/**
 * Whether an event is named `error` (its last `event:` field, as the format says). Providers that
 * name their error events send data of any form (not always an `error` key): the name alone makes
 * it a stream error. Only events the relay already inspects get here, and only one with an `event`
 * field is read further than a character and one search.
 */
function isErrorEvent(event: string): boolean {
  let at = event.lastIndexOf('\nevent:');
  if (at >= 0) at += 7;
  else if (event.charCodeAt(0) === 101 && event.startsWith('event:')) at = 6;
  else return false;
  if (event.charCodeAt(at) === 32) at++;
  return event.startsWith('error', at) && (at + 5 === event.length || event.charCodeAt(at + 5) === 10);
}

/** An event made of comment lines only (`: keep-alive`). */
function isCommentsOnly(event: string): boolean {
  for (const line of event.split('\n')) if (line !== '' && !line.startsWith(':')) return false;
  return true;
}

/**
 * The provider's body ended inside an event (data that is not whole JSON, no blank line after it):
 * its connection closed mid-event. Passed on, the cut event would end the client's stream with a
 * JSON syntax error (and then a [DONE] as if the answer were whole); the stream fails instead.
 */
class UnfinishedEvent extends Error {
  constructor() {
    super('the stream ended inside an event');
    this.name = 'UnfinishedEvent';
  }
}

/** What a provider may still send after its [DONE] before its connection is cut instead of reused. */
const DISCARD_AFTER_DONE = { maxMs: 2_000, maxBytes: 64 * 1024 };

const QUOTE = 34;
const COLON = 58;
const LETTER_U = 117;
const isJsonSpace = (code: number) => code === 32 || code === 9 || code === 10 || code === 13;

/**
 * The keys whose string values are answer text, as they end (`content"` also ends
 * `"reasoning_content"`): index 1 is reasoning.
 */
const TEXT_KEYS = ['content"', 'reasoning"', 'arguments"', 'refusal"'] as const;

/**
 * Adds the answer text in `text` (events as they are relayed) to `counts`: the characters of the
 * string values of `content`, `refusal`, `arguments`, `reasoning_content` and `reasoning`, as
 * their decoded lengths (an escape such as `\n`, `\"` or `\u00e9` is one character). Nothing is
 * parsed or allocated: the keys are found with `indexOf`, their values measured between quotes,
 * and each backslash looked for once per key. A key's name inside a string value is escaped there
 * (`\"content\"`), so it never matches. A key of another name ending the same way
 * (`"my_content"`) is not a key of ours: it must start with `"` (or `"reasoning_`).
 */
export function countAnswerText(text: string, counts: { relayedChars: number; relayedReasoningChars: number }): void {
  for (let k = 0; k < TEXT_KEYS.length; k++) {
    const needle = TEXT_KEYS[k]!;
    // The first backslash at or after the value being measured: -2 not looked for yet, -1 none left.
    let slash = -2;
    let at = text.indexOf(needle);
    while (at >= 0) {
      let i = at + needle.length;
      let reasoning = k === 1;
      let whole = text.charCodeAt(at - 1) === QUOTE;
      if (!whole && k === 0 && text.startsWith('"reasoning_', at - 11)) whole = reasoning = true;
      if (whole) {
        while (isJsonSpace(text.charCodeAt(i))) i++;
        if (text.charCodeAt(i) === COLON) {
          i++;
          while (isJsonSpace(text.charCodeAt(i))) i++;
        } else i = -1;
      }
      if (whole && i >= 0 && text.charCodeAt(i) === QUOTE) {
        let start = i + 1;
        let chars = 0;
        for (;;) {
          const quote = text.indexOf('"', start);
          if (quote < 0) {
            if (start < text.length) chars += text.length - start;
            i = text.length;
            break;
          }
          if (slash !== -1 && slash < start) slash = text.indexOf('\\', start);
          if (slash === -1 || slash > quote) {
            chars += quote - start;
            i = quote + 1;
            break;
          }
          chars += slash - start + 1;
          start = slash + (text.charCodeAt(slash + 1) === LETTER_U ? 6 : 2);
        }
        counts.relayedChars += chars;
        if (reasoning) counts.relayedReasoningChars += chars;
      } else i = at + needle.length;
      at = text.indexOf(needle, i);
    }
  }
}

/** The data of one event (its `data:` lines joined, as the format says), without parsing it. */
function eventData(event: string): string {
  return event
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
    .join('\n');
}

/**
 * The first event with data in a provider's first read (comments and data-less events before it
 * skipped): its data and that parsed, or undefined when there is none or it is not (whole) JSON.
 * For the rare paths that look at a stream's start; the relay itself never decodes a read twice.
 */
export function firstReadData(first: Uint8Array): { payload: string; value: unknown; named: 'error' | undefined } | undefined {
  const text = Buffer.from(first.buffer, first.byteOffset, first.byteLength).toString('utf8').replace(/\r\n?/g, '\n');
  for (const event of text.split('\n\n')) {
    if (!event.includes('data:')) continue;
    const payload = eventData(event);
    const named = isErrorEvent(event) ? 'error' : undefined;
    try {
      return { payload, value: JSON.parse(payload) as unknown, named };
    } catch {
      // Not JSON, or cut by the end of the read: only its name can still say what it is.
      return named ? { payload, value: undefined, named } : undefined;
    }
  }
  return undefined;
}

/** The id, `created` and `model` of the provider's first chunk (each only when well typed). */
function chunkIdentity(first: Uint8Array): { id?: string; created?: number; model?: string } {
  const chunk = firstReadData(first)?.value as ChatCompletionChunk | null | undefined;
  if (!chunk || typeof chunk !== 'object') return {};
  return {
    id: typeof chunk.id === 'string' ? chunk.id : undefined,
    created: Number.isInteger(chunk.created) ? (chunk.created as number) : undefined,
    model: typeof chunk.model === 'string' ? chunk.model : undefined,
  };
}

const errorEvent = (status: number, message: string, requestId: string, code?: string): StreamEvent => {
  const body = errorBody(status, message, { code, requestId });
  return { type: 'error', error: body.error as ErrorPayload };
};

/**
 * The error event a stream ends with when its exchange could not be stored: the ApiError's own
 * (e.g. 404, the conversation was deleted meanwhile), 503 when the database could not be reached,
 * else 500 — as the kit would answer the same failure outside a stream.
 */
export function storeFailure(error: unknown, requestId: string): StreamEvent {
  if (error instanceof ApiError) return { type: 'error', error: error.toBody(requestId).error as ErrorPayload };
  if (isDependencyUnavailable(error)) return errorEvent(503, 'A service the platform depends on is temporarily unavailable; the answer was not stored', requestId);
  return errorEvent(500, 'The answer could not be stored in the conversation', requestId);
}

export function relayStream(options: RelayOptions): { events: AsyncIterable<StreamEvent>; done: Promise<StreamOutcome> } {
  const relay = new StreamRelay(options);
  return { events: relay.events(), done: relay.done };
}

/**
 * One streamed answer's relay. A class rather than a closure: a generator function made per request
 * (an `async function*` inside `relayStream`) has a prototype of its own, so its generator objects
 * had maps of their own, and every `for await` over them missed its inline caches
 * (`Symbol.asyncIterator`, `next`, `return`: three trips to V8's runtime per streamed request, found
 * with `--log-ic`). A method is one function for every request.
 */
class StreamRelay {
  private readonly result: StreamOutcome = { outcome: 'ok', usage: null, content: '', reasoning: '', toolCalls: null, finishReason: null, relayedChars: 0, relayedReasoningChars: 0 };
  readonly done: Promise<StreamOutcome>;
  private settle!: (outcome: StreamOutcome) => void;
  private extraPending: RelayOptions['firstChunkExtra'];
  private finished = false;
  private saved = false;

  constructor(private readonly options: RelayOptions) {
    this.done = new Promise<StreamOutcome>((resolve) => (this.settle = resolve));
    this.extraPending = options.firstChunkExtra;
  }

  /**
   * Only events that can carry usage, an error or [DONE] (or everything while collecting) are
   * parsed, and events with a field other than `data` (`event:`, `id:`, `retry:`), which may have
   * no data at all.
   */
  private inspect(text: string): boolean {
    return this.options.collect || this.extraPending !== undefined || text.includes('[DONE]') || text.includes('"error"') || /"usage":\s?\{/.test(text) || hasOtherField(text);
  }

  /**
   * One event (its lines, without the blank line that ended it) → what to send, or null to drop it.
   * `last`: the text the provider's body ended with, no blank line after it; data there that is not
   * JSON is an event the provider's end cut short (`UnfinishedEvent`), not one to pass on.
   */
  private handleEvent(event: string, last?: boolean): StreamEvent | 'done' | 'error' | null {
    if (isErrorEvent(event)) {
      this.options.onUpstreamError(eventData(event) || event, 'upstream_error_event');
      return 'error';
    }
    // Without data, only comments (keep-alives) pass: the SDKs parse every other event's data as
    // JSON, and an `event: ping` with none breaks their stream.
    if (!event.includes('data:')) return event.trim() && isCommentsOnly(event) ? { type: 'raw', text: event } : null;
    const payload = eventData(event);
    if (payload.trim() === '[DONE]') return 'done';
    let chunk: ChatCompletionChunk & { error?: unknown };
    try {
      chunk = JSON.parse(payload) as ChatCompletionChunk & { error?: unknown };
    } catch {
      if (last) throw new UnfinishedEvent();
      return { type: 'raw', text: event };
    }
    if (chunk.error) {
      this.options.onUpstreamError(payload, 'upstream_error_event');
      return 'error';
    }
    // A copy, cleaned: the event goes to the client as the provider sent it, the counts to the meter as numbers.
    if (chunk.usage && typeof chunk.usage === 'object' && !Array.isArray(chunk.usage)) this.result.usage = cleanUsage(usageCopy(chunk.usage as Record<string, unknown>), this.options.usageLog, this.options.requestId);
    const choices = chunk.choices;
    // The usage-only chunk (asked for by the gateway, not the client): `choices: []` as OpenAI sends
    // it, or no `choices` at all (absent or null) as some providers send it.
    if (chunk.usage && (choices === undefined || choices === null || (Array.isArray(choices) && choices.length === 0))) {
      if (!this.options.clientWantsUsage) return null;
      // The client asked for it: with `choices: []` as OpenAI sends it, since the SDK's stream helper
      // iterates `chunk.choices` (absent or null, it throws). Written again only in that case.
      if (!Array.isArray(choices)) {
        chunk.choices = [];
        return { type: 'chunk', chunk };
      }
    }
    if (this.options.collect && Array.isArray(choices)) this.collect(choices);
    if (this.extraPending && Array.isArray(choices)) {
      Object.assign(chunk, this.extraPending);
      this.extraPending = undefined;
      return { type: 'chunk', chunk };
    }
    return { type: 'raw', text: event };
  }

  private collect(choices: NonNullable<ChatCompletionChunk['choices']>): void {
    for (const choice of choices) {
      if (choice?.index !== 0 && choice?.index !== undefined) continue;
      const delta = choice?.delta ?? {};
      if (typeof delta.content === 'string') this.result.content += delta.content;
      if (typeof delta.reasoning_content === 'string') this.result.reasoning += delta.reasoning_content;
      if (typeof delta.reasoning === 'string') this.result.reasoning += delta.reasoning;
      if (Array.isArray(delta.tool_calls)) for (const fragment of delta.tool_calls as ToolCallDelta[]) this.collectToolCall(fragment);
      if (choice?.finish_reason) this.result.finishReason = choice.finish_reason;
    }
  }

  /**
   * One tool-call fragment, assembled by the kit's rule (`collectToolCallDelta`, shared with
   * response-api's streamed steps). A custom tool's fragment is assembled by the same rule, its
   * input taken as the arguments, and its call marked custom.
   */
  private collectToolCall(fragment: ToolCallDelta): void {
    const custom = fragment?.custom;
    if (!custom || typeof custom !== 'object') {
      this.result.toolCalls = collectToolCallDelta(this.result.toolCalls, fragment);
      return;
    }
    const calls = collectToolCallDelta(this.result.toolCalls, { index: fragment.index, id: fragment.id, function: { name: custom.name, arguments: custom.input } })!;
    // The call the fragment went to, found as the kit's rule finds it.
    const call = typeof fragment.index === 'number' ? calls.find((c) => c.index === fragment.index) : calls.at(-1);
    if (call) call.custom = true;
    this.result.toolCalls = calls;
  }

  /** Stores the exchange once (`save`); the error event to end with when storing failed, else null. */
  private async store(complete: boolean): Promise<StreamEvent | null> {
    const save = this.options.save;
    if (!save || this.saved) return null;
    this.saved = true;
    try {
      await save(this.result, complete);
      return null;
    } catch (error) {
      return storeFailure(error, this.options.requestId);
    }
  }

  async *events(): AsyncGenerator<StreamEvent> {
    const splitter = new SseSplitter(this.options.maxEventBytes);
    let upstreamError = false;
    // The provider's [DONE] completes the answer: the client's stream ends there, in the same write
    // as the events before it, without waiting for the provider to close its body (which usually
    // follows in the same read, but is only reported a tick later). Anything after it is dropped.
    let providerDone = false;
    try {
      try {
        // The provider's chunks, taken as they are buffered (BodyChunks): a wait only when none is.
        let pending: Uint8Array | undefined = this.options.firstChunk;
        try {
          for (;;) {
            let raw: Uint8Array | null | undefined = pending;
            pending = undefined;
            if (raw === undefined) raw = this.options.rest.read();
            if (raw === undefined) {
              await this.options.rest.readable();
              continue;
            }
            if (raw === null) break;
            const complete = splitter.push(raw);
            if (complete === null) continue;
            // Fast path: nothing in these events to look at → forwarded in one write, as they are.
            if (!this.inspect(complete)) {
              countAnswerText(complete, this.result);
              yield { type: 'raw', text: complete };
              continue;
            }
            // Only the events that need a look are parsed; the others around them still leave
            // together, as one write, in their order (a read often holds a whole answer's events
            // and only its last ones carry usage and [DONE]).
            let plain = '';
            for (const event of complete.split('\n\n')) {
              const out = this.inspect(event) || !event.trim() ? this.handleEvent(event) : ({ type: 'raw', text: event } as const);
              if (out !== null && typeof out === 'object') countAnswerText(event, this.result);
              if (out !== null && out !== 'done' && out !== 'error' && out.type === 'raw') {
                plain = plain ? `${plain}\n\n${out.text}` : out.text;
                continue;
              }
              if (plain) {
                yield { type: 'raw', text: plain };
                plain = '';
              }
              if (out === 'error') upstreamError = true;
              else if (out === 'done') providerDone = true;
              else if (out !== null) yield out;
              if (upstreamError || providerDone) break;
            }
            if (upstreamError || providerDone) break;
            if (plain) yield { type: 'raw', text: plain };
          }
        } finally {
          // After [DONE] the rest of the body is read and dropped, so the provider's connection is
          // reused; leaving early otherwise (error event, limit, client gone) cuts it.
          if (providerDone) this.options.rest.discardRest(DISCARD_AFTER_DONE);
          else this.options.rest.release();
        }
        if (!upstreamError && !providerDone) {
          const tail = splitter.end().trim();
          const out = tail ? this.handleEvent(tail, true) : null;
          if (out === 'error') upstreamError = true;
          else if (out !== null && out !== 'done') {
            countAnswerText(tail, this.result);
            yield out;
          }
        }
      } catch (error) {
        const failure = this.classify(error);
        if (failure === null) {
          this.result.outcome = 'client_closed';
          return;
        }
        this.result.outcome = failure.outcome;
        this.options.onUpstreamError(failure.detail, failure.outcome);
        // What arrived is stored (incomplete) before the stream ends; the stream's own error is the one reported.
        if (this.options.save) await this.store(false);
        yield errorEvent(failure.status, failure.message, this.options.requestId, failure.code);
        return;
      }
      if (upstreamError) {
        this.result.outcome = 'upstream_error_event';
        if (this.options.save) await this.store(false);
        yield errorEvent(502, 'The model provider reported an error during the stream', this.options.requestId);
        return;
      }
      // The client asked for usage and the provider sent none: the chunk it was promised (rare path).
      if (this.result.usage === null && this.options.clientWantsUsage && this.options.usageFallback) yield this.usageChunk(this.options.usageFallback);
      // [DONE] means the exchange is stored: the next turn, sent once the client has it, reads it.
      if (this.options.save) {
        const failed = await this.store(true);
        if (failed) {
          yield failed;
          return;
        }
      }
      // An upstream that ends cleanly without [DONE] still gets one towards the client.
      yield { type: 'done' };
    } finally {
      // The consumer stopping early (client gone) also lands here.
      if (!this.finished && this.result.outcome === 'ok' && this.options.signal.aborted) this.result.outcome = 'client_closed';
      this.finished = true;
      // A stream cut short (the client left) stores what arrived.
      if (this.options.save && !this.saved) await this.store(false);
      this.settle(this.result);
    }
  }

  /** The usage-only chunk of a stream whose provider reported no usage (see `usageFallback`). */
  private usageChunk(fallback: NonNullable<RelayOptions['usageFallback']>): StreamEvent {
    const first = chunkIdentity(this.options.firstChunk);
    return {
      type: 'chunk',
      chunk: { id: first.id ?? completionId(), object: 'chat.completion.chunk', created: first.created ?? fallback.created, model: first.model ?? fallback.model, choices: [], usage: fallback.usage(this.result) },
    };
  }

  private classify(error: unknown) {
    if (this.options.signal.aborted) {
      const reason = this.options.signal.reason;
      if (reason instanceof ClientClosed) return null;
      return { outcome: 'deadline' as const, status: 504, message: 'The model provider took longer than the stream time limit', code: undefined, detail: 'stream deadline reached' };
    }
    if (error instanceof SseEventTooLarge) {
      return {
        outcome: 'event_too_large' as const,
        status: 502,
        message: `The model provider sent a stream event larger than the limit of ${error.limit} bytes`,
        code: 'upstream_response_too_large',
        detail: error.message,
      };
    }
    return {
      outcome: 'stream_error' as const,
      status: 502,
      message: 'The model provider failed during the stream',
      code: undefined,
      detail: (error as Error)?.message ?? String(error),
    };
  }
}
