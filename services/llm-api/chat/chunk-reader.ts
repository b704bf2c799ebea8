import type { Readable } from 'node:stream';

/**
 * A provider's streamed body, read chunk by chunk without an async iterator. A held stream relays
 * every provider chunk, and Node's iterator over a stream is an async generator of its own: one
 * more promise and microtask turn per chunk, ~10 % of the relay's CPU per chunk (bench/README.md,
 * twelfth pass). Here whatever is buffered is taken at once (`read`), and only an empty buffer
 * costs a wait (`readable`).
 *
 * The outcomes match the iterator's: the chunks in order, then the end; the body's error; a body
 * closed before its end (the connection cut) fails with ERR_STREAM_PREMATURE_CLOSE; `release`
 * destroys a body that has not ended, and `discardRest` lets one finish (read and dropped) so that
 * its connection is reused.
 */
export class ChunkReader {
  private ended = false;
  private failure: unknown;
  private waiting: (() => void) | null = null;

  constructor(private readonly body: Readable) {
    body.on('readable', this.wake);
    body.on('end', this.onEnd);
    body.on('error', this.onError);
    body.on('close', this.onClose);
  }

  /**
   * What the body has buffered (all of it, as one chunk), `null` once it has ended, or `undefined`
   * when nothing has arrived yet (then wait for `readable()`). Throws the body's failure.
   */
  read(): Uint8Array | null | undefined {
    if (this.failure !== undefined) throw this.failure;
    const chunk = this.body.read() as Uint8Array | null;
    if (chunk !== null) return chunk;
    return this.ended ? null : undefined;
  }

  /** Settles when `read` has something new to say: a chunk, the end or a failure. */
  readable(): Promise<void> {
    if (this.ended || this.failure !== undefined || this.body.readableLength > 0) return Promise.resolve();
    return new Promise((resolve) => (this.waiting = resolve));
  }

  /** Stops reading: a body that has not ended is destroyed (its connection is not reused). */
  release(): void {
    this.detach();
    if (!this.ended && !this.body.destroyed) this.body.destroy();
  }

  /**
   * Stops reading but lets the body finish: what is left is read and dropped, so the connection
   * goes back to the pool once the body ends. A body that sends more than `maxBytes`, or has not
   * ended after `maxMs`, is destroyed instead.
   */
  discardRest(limits: { maxMs: number; maxBytes: number }): void {
    this.detach();
    const body = this.body;
    if (this.ended || body.destroyed) return;
    let left = limits.maxBytes;
    const cut = () => body.destroy();
    const timer = setTimeout(cut, limits.maxMs);
    timer.unref?.();
    body.once('close', () => clearTimeout(timer));
    // A 'data' listener puts the body back into flowing mode once the 'readable' one is gone; what
    // was already buffered comes through it first, so it is counted too.
    body.on('data', (chunk: Uint8Array) => {
      left -= chunk.length;
      if (left < 0) cut();
    });
  }

  private detach(): void {
    this.body.off('readable', this.wake);
    this.body.off('end', this.onEnd);
    this.body.off('close', this.onClose);
    // The error listener stays: a destroyed or draining body may still report, and an unheard error would crash.
  }

  private readonly wake = () => {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  };

  private readonly onEnd = () => {
    this.ended = true;
    this.wake();
  };

  private readonly onError = (error: unknown) => {
    this.failure ??= error ?? new Error('the provider stream failed');
    this.wake();
  };

  private readonly onClose = () => {
    if (this.ended || this.failure !== undefined) return;
    this.failure = Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
    this.wake();
  };
}
