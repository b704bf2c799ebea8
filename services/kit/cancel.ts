/**
 * What a domain function reads of a cancellation: whether and why it was aborted, and one-shot
 * `abort` listeners. An AbortSignal is one; so is a `CancelToken`. undici takes either as a
 * request's `signal` (it only calls `addEventListener` / `removeEventListener` and reads `aborted`
 * and `reason`).
 */
export interface CancelSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * A cancellation as a plain object. Node builds every AbortSignal as an EventTarget whose prototype
 * it then changes, which is slow to make and slow to collect: on the chat path the request's signal
 * was a fifth of what outlived a young-generation collection (`bench/alloc.ts --survivors`). This
 * costs an object and, while something listens, an array; `abortSignal` makes a real AbortSignal
 * only for an API that demands one.
 */
export class CancelToken implements CancelSignal {
  aborted = false;
  reason: unknown = undefined;
  private listeners: Array<() => void> | null = null;
  private controller: AbortController | null = null;

  addEventListener(type: 'abort', listener: () => void): void {
    // An aborted AbortSignal never fires again either.
    if (type !== 'abort' || this.aborted) return;
    // Usually one listener (the provider request's): `[]` then `push` would reserve room for 17.
    if (this.listeners) this.listeners.push(listener);
    else this.listeners = [listener];
  }

  removeEventListener(type: 'abort', listener: () => void): void {
    const index = type === 'abort' && this.listeners ? this.listeners.indexOf(listener) : -1;
    if (index >= 0) this.listeners!.splice(index, 1);
  }

  /** The first reason wins; later calls do nothing. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.listeners;
    this.listeners = null;
    for (const listener of listeners ?? []) {
      try {
        listener();
      } catch (error) {
        // As an EventTarget does: the other listeners still run, and the error is reported as uncaught.
        process.nextTick(() => {
          throw error;
        });
      }
    }
    this.controller?.abort(reason);
  }

  /** An AbortSignal that follows this token (made once, on first use). */
  get abortSignal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }
}
