import { errorBody, type CancelSignal } from '../../kit/index.js';
import { ClientClosed } from '../routing/failover.js';
import type { ChunkReader } from './chunk-reader.js';
import { SseEventTooLarge, SseSplitter } from './sse.js';
import type { ChatCompletionChunk, ConversationRef, ErrorPayload, Usage } from './types.js';

/**
 * The streamed answer, as a sequence of events for the route to write. Upstream events pass through
 * as they arrive (a batch of events nobody needs to look at is one `raw` event, written as is).
 * Along the way it captures usage (always asked upstream), drops the usage-only chunk when the
 * client did not ask for it, collects the assistant text for storage, and ends with `done`
 * (the route writes `data: [DONE]`), or with one `error` event (and no `[DONE]`) when the upstream
 * fails after the start, sends an error event of its own, sends an event over the size limit, or
 * runs past the deadline. The upstream's own error text never reaches the client: the error event
 * is ours, and the upstream's goes to `onUpstreamError` (the caller logs it, redacted).
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
  /** Assistant text of choice 0 (and reasoning), collected only when `collect` is set. */
  content: string;
  reasoning: string;
  finishReason: string | null;
}

export interface RelayOptions {
  /** The provider's first body chunk (read before the client got its 200) and the rest. */
  firstChunk: Uint8Array;
  rest: ChunkReader;
  clientWantsUsage: boolean;
  collect: boolean;
  requestId: string;
  /** Merged into the first chunk that has a `choices` array. */
  firstChunkExtra?: { conversation: ConversationRef };
  maxEventBytes: number;
  /** Aborted with `ClientClosed` when the client leaves, or with an ApiError (504) at the deadline. */
  signal: CancelSignal;
  onUpstreamError(detail: string, kind: Exclude<StreamOutcomeKind, 'ok' | 'client_closed'>): void;
}

/** What a provider may still send after its [DONE] before its connection is cut instead of reused. */
const DISCARD_AFTER_DONE = { maxMs: 2_000, maxBytes: 64 * 1024 };

const errorEvent = (status: number, message: string, requestId: string, code?: string): StreamEvent => {
  const body = errorBody(status, message, { code, requestId });
  return { type: 'error', error: body.error as ErrorPayload };
};

export function relayStream(options: RelayOptions): { events: AsyncIterable<StreamEvent>; done: Promise<StreamOutcome> } {
  const result: StreamOutcome = { outcome: 'ok', usage: null, content: '', reasoning: '', finishReason: null };
  let settle!: (outcome: StreamOutcome) => void;
  const done = new Promise<StreamOutcome>((resolve) => (settle = resolve));
  let extraPending = options.firstChunkExtra;
  let finished = false;

  /** Only events that can carry usage, an error or [DONE] (or everything while collecting) are parsed. */
  const inspect = (text: string) =>
    options.collect || extraPending !== undefined || text.includes('[DONE]') || text.includes('"error"') || /"usage":\s?\{/.test(text);

  /** One event (its lines, without the blank line that ended it) → what to send, or null to drop it. */
  function handleEvent(event: string): StreamEvent | 'done' | 'error' | null {
    if (!event.includes('data:')) return event.trim() ? { type: 'raw', text: event } : null;
    const payload = event
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
      .join('\n');
    if (payload.trim() === '[DONE]') return 'done';
    let chunk: ChatCompletionChunk & { error?: unknown };
    try {
      chunk = JSON.parse(payload) as ChatCompletionChunk & { error?: unknown };
    } catch {
      return { type: 'raw', text: event };
    }
    if (chunk.error) {
      options.onUpstreamError(payload, 'upstream_error_event');
      return 'error';
    }
    if (chunk.usage) result.usage = chunk.usage;
    const choices = chunk.choices;
    if (Array.isArray(choices) && choices.length === 0 && chunk.usage && !options.clientWantsUsage) return null;
    if (options.collect && Array.isArray(choices)) collect(choices);
    if (extraPending && Array.isArray(choices)) {
      Object.assign(chunk, extraPending);
      extraPending = undefined;
      return { type: 'chunk', chunk };
    }
    return { type: 'raw', text: event };
  }

  function collect(choices: NonNullable<ChatCompletionChunk['choices']>): void {
    for (const choice of choices) {
      if (choice?.index !== 0 && choice?.index !== undefined) continue;
      const delta = choice?.delta ?? {};
      if (typeof delta.content === 'string') result.content += delta.content;
      if (typeof delta.reasoning_content === 'string') result.reasoning += delta.reasoning_content;
      if (typeof delta.reasoning === 'string') result.reasoning += delta.reasoning;
      if (choice?.finish_reason) result.finishReason = choice.finish_reason;
    }
  }

  async function* run(): AsyncGenerator<StreamEvent> {
    const splitter = new SseSplitter(options.maxEventBytes);
    let upstreamError = false;
    // The provider's [DONE] completes the answer: the client's stream ends there, in the same write
    // as the events before it, without waiting for the provider to close its body (which usually
    // follows in the same read, but is only reported a tick later). Anything after it is dropped.
    let providerDone = false;
    try {
      try {
        // The provider's chunks, taken as they are buffered (ChunkReader): a wait only when none is.
        let pending: Uint8Array | undefined = options.firstChunk;
        try {
          for (;;) {
            let raw: Uint8Array | null | undefined = pending;
            pending = undefined;
            if (raw === undefined) raw = options.rest.read();
            if (raw === undefined) {
              await options.rest.readable();
              continue;
            }
            if (raw === null) break;
            const complete = splitter.push(raw);
            if (complete === null) continue;
            // Fast path: nothing in these events to look at → forwarded in one write, as they are.
            if (!inspect(complete)) {
              yield { type: 'raw', text: complete };
              continue;
            }
            // Only the events that need a look are parsed; the others around them still leave
            // together, as one write, in their order (a read often holds a whole answer's events
            // and only its last ones carry usage and [DONE]).
            let plain = '';
            for (const event of complete.split('\n\n')) {
              const out = inspect(event) || !event.trim() ? handleEvent(event) : ({ type: 'raw', text: event } as const);
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
          if (providerDone) options.rest.discardRest(DISCARD_AFTER_DONE);
          else options.rest.release();
        }
        if (!upstreamError && !providerDone) {
          const tail = splitter.end().trim();
          const out = tail ? handleEvent(tail) : null;
          if (out === 'error') upstreamError = true;
          else if (out !== null && out !== 'done') yield out;
        }
      } catch (error) {
        const failure = classify(error);
        if (failure === null) {
          result.outcome = 'client_closed';
          return;
        }
        result.outcome = failure.outcome;
        options.onUpstreamError(failure.detail, failure.outcome);
        yield errorEvent(failure.status, failure.message, options.requestId, failure.code);
        return;
      }
      if (upstreamError) {
        result.outcome = 'upstream_error_event';
        yield errorEvent(502, 'The model provider reported an error during the stream', options.requestId);
        return;
      }
      // An upstream that ends cleanly without [DONE] still gets one towards the client.
      yield { type: 'done' };
    } finally {
      // The consumer stopping early (client gone) also lands here.
      if (!finished && result.outcome === 'ok' && options.signal.aborted) result.outcome = 'client_closed';
      finished = true;
      settle(result);
    }
  }

  function classify(error: unknown) {
    if (options.signal.aborted) {
      const reason = options.signal.reason;
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

  return { events: run(), done };
}
