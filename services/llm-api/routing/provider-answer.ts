import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { CancelSignal } from '../../kit/index.js';

/** What a provider's body is read through, chunk by chunk (the stream relay's view of it). */
export interface BodyChunks {
  /**
   * What has arrived and not been read yet (all of it, as one chunk), `null` once the body has
   * ended, or `undefined` when nothing has arrived yet (then wait for `readable()`). Throws the
   * body's failure.
   */
  read(): Uint8Array | null | undefined;
  /** Settles when `read` has something new to say: a chunk, the end or a failure. */
  readable(): Promise<void>;
  /** Stops reading: a body that has not ended is cut (its connection is not reused). */
  release(): void;
  /**
   * Stops reading but lets the body finish: what is left is dropped as it arrives, so the
   * connection goes back to the pool once the body ends. A body that sends more than `maxBytes`
   * more, or has not ended after `maxMs`, is cut instead.
   */
  discardRest(limits: { maxMs: number; maxBytes: number }): void;
}

/** Past this many unread bytes the connection stops being read until the relay catches up. */
const HIGH_WATER_BYTES = 64 * 1024;

/**
 * One completion's answer from a provider, received as undici's dispatch handler: the status and
 * headers, then the body, kept as the chunks the connection delivered until they are read.
 *
 * Not undici's `request()`: that wraps every answer in a Readable stream (its state objects, its
 * events, a tick per `end`), and the chat path reads a body in one of two simple ways, whole
 * (`readAll`) or chunk by chunk (`read`/`readable`). Receiving the chunks directly took 0.88× the
 * main thread's CPU per streamed completion, and ~0.95× per JSON one (bench/README.md,
 * twenty-eighth pass).
 *
 * The outcomes are those of undici's body: the chunks in order, then the end; a connection cut or
 * a body timeout fails `read` with undici's error; `signal` aborting cuts the request and fails it.
 * The promise from `started` settles at the answer's head (or the failure before one).
 */
export class ProviderAnswer implements BodyChunks, Dispatcher.DispatchHandler {
  statusCode = 0;
  headers: IncomingHttpHeaders = {};
  /** Settles with this answer once its head has arrived, or fails as the request did. */
  readonly started: Promise<ProviderAnswer>;

  private controller: Dispatcher.DispatchController | null = null;
  private chunks: Buffer[] = [];
  private bufferedBytes = 0;
  private ended = false;
  private failure: unknown = undefined;
  private waiting: (() => void) | null = null;
  private settleStart: { resolve: (answer: ProviderAnswer) => void; reject: (error: unknown) => void } | null = null;
  /** While discarding: bytes still allowed before the connection is cut, and the time bound. */
  private discardBudget = -1;
  private discardTimer: NodeJS.Timeout | undefined;

  constructor(private readonly signal?: CancelSignal) {
    this.started = new Promise((resolve, reject) => (this.settleStart = { resolve, reject }));
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.signal?.aborted) controller.abort(abortReason(this.signal));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.statusCode = statusCode;
    this.headers = headers;
    const settle = this.settleStart;
    this.settleStart = null;
    settle?.resolve(this);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.discardBudget >= 0) {
      this.discardBudget -= chunk.length;
      if (this.discardBudget < 0) controller.abort(new Error('the provider sent too much after its answer'));
      return;
    }
    this.chunks.push(chunk);
    this.bufferedBytes += chunk.length;
    if (this.bufferedBytes >= HIGH_WATER_BYTES) controller.pause();
    this.wake();
  }

  onResponseEnd(): void {
    this.ended = true;
    this.finish();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.failure ??= error ?? new Error('the provider request failed');
    const settle = this.settleStart;
    this.settleStart = null;
    settle?.reject(this.failure);
    this.finish();
  }

  read(): Buffer | null | undefined {
    if (this.failure !== undefined) throw this.failure;
    const { chunks } = this;
    if (chunks.length === 0) return this.ended ? null : undefined;
    const taken = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.bufferedBytes);
    this.chunks = [];
    this.bufferedBytes = 0;
    // After the buffer is emptied: resuming may deliver the next chunks at once, into it.
    if (this.controller?.paused) this.controller.resume();
    return taken;
  }

  readable(): Promise<void> {
    if (this.ended || this.failure !== undefined || this.chunks.length > 0) return Promise.resolve();
    return new Promise((resolve) => (this.waiting = resolve));
  }

  /** The whole body, up to `max` bytes: a longer one is cut there (`truncated`, its connection closed). */
  async readAll(max: number): Promise<{ bytes: Buffer; truncated: boolean }> {
    const parts: Buffer[] = [];
    let size = 0;
    for (;;) {
      const chunk = this.read();
      if (chunk === null) break;
      if (chunk === undefined) {
        await this.readable();
        continue;
      }
      if (size + chunk.length > max) {
        parts.push(chunk.subarray(0, max - size));
        this.release();
        return { bytes: Buffer.concat(parts, max), truncated: true };
      }
      parts.push(chunk);
      size += chunk.length;
    }
    return { bytes: parts.length === 1 ? parts[0]! : Buffer.concat(parts, size), truncated: false };
  }

  release(): void {
    this.drop();
    if (!this.ended && this.failure === undefined) this.controller?.abort(new Error('the answer was not read to its end'));
  }

  discardRest(limits: { maxMs: number; maxBytes: number }): void {
    const buffered = this.bufferedBytes;
    this.drop();
    if (this.ended || this.failure !== undefined) return;
    if (buffered > limits.maxBytes) {
      this.controller?.abort(new Error('the provider sent too much after its answer'));
      return;
    }
    this.discardBudget = limits.maxBytes - buffered;
    this.discardTimer = setTimeout(() => this.controller?.abort(new Error('the provider did not end its answer in time')), limits.maxMs);
    this.discardTimer.unref?.();
    if (this.controller?.paused) this.controller.resume();
  }

  /** Forgets what is buffered and any waiter: nobody reads this body any more. */
  private drop(): void {
    this.chunks = [];
    this.bufferedBytes = 0;
    this.waiting = null;
  }

  private finish(): void {
    this.signal?.removeEventListener('abort', this.onAbort);
    if (this.discardTimer !== undefined) clearTimeout(this.discardTimer);
    this.wake();
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }

  private readonly onAbort = () => {
    const reason = abortReason(this.signal!);
    if (this.controller) {
      this.controller.abort(reason);
      return;
    }
    // No connection yet (queued for a free one in the pool, or connecting): nothing to cut, but the
    // caller must not wait for a connection to free up (a stream can hold one for many minutes) to
    // learn that its client left or its time ran out. undici aborts the request when it starts it
    // (onRequestStart), so it never reaches the provider.
    this.onResponseError(null as never, reason);
  };
}

function abortReason(signal: CancelSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('the request was cancelled');
}
