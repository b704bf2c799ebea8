import { StringDecoder } from 'node:string_decoder';
import type { Response } from 'express';

/**
 * Relays an upstream SSE stream to the client event by event, as bytes arrive (no added
 * buffering: each complete event is written at once; only a partial event waits for its end).
 * Along the way it captures usage (always asked upstream), drops the usage-only chunk when the
 * client did not ask for it, collects the assistant text for storage, sends `: keep-alive`
 * comments when the upstream is quiet, ends with `data: [DONE]`, and on an upstream failure after
 * the start sends one `data: {"error":…}` event and closes without `[DONE]`.
 */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details?: { reasoning_tokens?: number };
}

export interface StreamOutcome {
  outcome: 'ok' | 'client_closed' | 'stream_error' | 'upstream_error_event';
  usage: Usage | null;
  firstChunkAt: number | null;
  /** Assistant text of choice 0 (and reasoning), collected only when `collect` is set. */
  content: string;
  reasoning: string;
  finishReason: string | null;
}

export interface RelayOptions {
  res: Response;
  /** The provider's first body chunk (read by dispatchStream before the client got its 200) and the rest. */
  firstChunk: Buffer;
  rest: AsyncIterator<unknown>;
  clientWantsUsage: boolean;
  keepAliveMs: number;
  collect: boolean;
  requestId: string;
  /** Extra fields merged into the first chunk that has a `choices` array (e.g. `conversation`). */
  firstChunkExtra?: Record<string, unknown>;
  now: () => number;
}

const DONE = 'data: [DONE]\n\n';

export async function relayStream(options: RelayOptions): Promise<StreamOutcome> {
  const { res } = options;
  const result: StreamOutcome = { outcome: 'ok', usage: null, firstChunkAt: null, content: '', reasoning: '', finishReason: null };
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  res.socket?.setNoDelay(true);
  res.flushHeaders();

  let lastWrite = options.now();
  let keepAlive: NodeJS.Timeout | undefined;
  if (options.keepAliveMs > 0) {
    keepAlive = setInterval(() => {
      if (options.now() - lastWrite >= options.keepAliveMs && !res.writableEnded) write(': keep-alive\n\n');
    }, Math.max(Math.floor(options.keepAliveMs / 2), 5));
  }

  let waiting: Promise<void> | null = null;
  function write(text: string): void {
    lastWrite = options.now();
    if (!res.write(text) && !waiting) waiting = new Promise((resolve) => res.once('drain', () => ((waiting = null), resolve())));
  }

  let sawDone = false;
  let sawError = false;
  let extraPending = options.firstChunkExtra;

  /** Only events that can carry usage, an error, [DONE] — or everything while collecting — are parsed. */
  const inspect = (event: string) =>
    options.collect || extraPending !== undefined || event.includes('[DONE]') || event.includes('"error"') || /"usage":\s?\{/.test(event);

  function handleEvent(event: string): void {
    // event: lines of one SSE event without the blank line that ended it.
    if (!inspect(event)) {
      write(`${event}\n\n`);
      return;
    }
    if (!event.includes('data:')) {
      if (event.trim()) write(`${event}\n\n`); // comments and other fields pass through
      return;
    }
    const payload = event
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
      .join('\n');
    if (payload.trim() === '[DONE]') {
      sawDone = true;
      return;
    }
    let chunk: Record<string, any>;
    try {
      chunk = JSON.parse(payload);
    } catch {
      write(`${event}\n\n`);
      return;
    }
    if (chunk.error) {
      sawError = true;
      write(`data: ${JSON.stringify(chunk)}\n\n`);
      return;
    }
    if (chunk.usage) result.usage = chunk.usage;
    const choices = chunk.choices as any[] | undefined;
    if (Array.isArray(choices) && choices.length === 0 && chunk.usage && !options.clientWantsUsage) return;
    if (options.collect && Array.isArray(choices)) {
      for (const choice of choices) {
        if (choice?.index !== 0 && choice?.index !== undefined) continue;
        const delta = choice?.delta ?? {};
        if (typeof delta.content === 'string') result.content += delta.content;
        if (typeof delta.reasoning_content === 'string') result.reasoning += delta.reasoning_content;
        if (typeof delta.reasoning === 'string') result.reasoning += delta.reasoning;
        if (choice?.finish_reason) result.finishReason = choice.finish_reason;
      }
    }
    if (extraPending && Array.isArray(choices)) {
      Object.assign(chunk, extraPending);
      extraPending = undefined;
      write(`data: ${JSON.stringify(chunk)}\n\n`);
      return;
    }
    write(`${event}\n\n`);
  }

  const decoder = new StringDecoder('utf8');
  let pending = '';
  try {
    for await (const raw of withFirst(options.firstChunk, options.rest)) {
      if (result.firstChunkAt === null) result.firstChunkAt = options.now();
      let text = decoder.write(raw as Buffer);
      if (text.includes('\r')) text = text.replace(/\r\n?/g, '\n');
      pending += text;
      const cut = pending.lastIndexOf('\n\n');
      if (cut < 0) continue;
      const complete = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      // Fast path: nothing in these events to inspect → forward them in one write, as they are.
      if (!inspect(complete)) write(`${complete}\n\n`);
      else for (const event of complete.split('\n\n')) handleEvent(event);
      if (waiting) await waiting;
      if (sawError) break;
    }
    if (!sawError && pending.trim()) handleEvent(pending.trim());
  } catch (error) {
    clearInterval(keepAlive);
    if (res.destroyed || res.writableEnded || (error as Error).name === 'AbortError') {
      result.outcome = 'client_closed';
      return result;
    }
    result.outcome = 'stream_error';
    const body = {
      error: {
        message: 'The model provider failed during the stream',
        type: 'server_error',
        param: null,
        code: 'upstream_error',
        request_id: options.requestId,
      },
    };
    res.end(`data: ${JSON.stringify(body)}\n\n`);
    return result;
  }
  clearInterval(keepAlive);
  if (res.destroyed) {
    result.outcome = 'client_closed';
    return result;
  }
  if (sawError) {
    result.outcome = 'upstream_error_event';
    res.end();
    return result;
  }
  void sawDone; // An upstream that ends cleanly without [DONE] still gets one towards the client.
  res.end(DONE);
  return result;
}

async function* withFirst(first: Buffer, rest: AsyncIterator<unknown>): AsyncGenerator<unknown> {
  try {
    yield first;
    for (;;) {
      const next = await rest.next();
      if (next.done) return;
      yield next.value;
    }
  } finally {
    // Leaving early (error event, client gone) releases the provider's socket.
    await rest.return?.();
  }
}
