import type { Response } from 'express';
import type { StreamEvent } from './recorder.js';

/**
 * Writes Responses events to a streaming caller as server-sent events, as llm-api writes a chat
 * stream: the head goes with the first event; a `: keep-alive` comment is written when nothing was
 * for `keepAliveMs` (0 = never), since a step that writes no text (reasoning, tool-call arguments)
 * and a long tool call produce no events, and the edge cuts a stream silent for its read timeout
 * (`EDGE_UPSTREAM_READ_TIMEOUT_MS`); SDKs skip comments. A write the client's socket did not take
 * (`res.write` false) makes `drained()` a promise until the socket drains or closes, which the
 * loop awaits before it reads more of the step from llm-api.
 *
 * The keep-alive timer ticks every half interval and writes the comment on the second tick without
 * a write in between (a silence of one to one and a half intervals), so an event costs no clock read.
 */
export class EventStreamWriter {
  private opened = false;
  private waiting: Promise<void> | null = null;
  private release: (() => void) | null = null;
  private quietTicks = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly res: Response,
    keepAliveMs: number,
  ) {
    if (keepAliveMs > 0) {
      this.timer = setInterval(() => this.tick(), Math.max(Math.floor(keepAliveMs / 2), 5));
      this.timer.unref();
    }
  }

  /** `write` as a bound function, for the recorder's `onEvent`. */
  readonly write = (event: StreamEvent): void => {
    this.writeEncoded(event.type, JSON.stringify(event));
  };

  /** An event whose JSON is at hand (a kept event, replayed as it was sent). */
  writeEncoded(type: string, data: string): void {
    this.send(`event: ${type}\ndata: ${data}\n\n`);
  }

  /** A promise while the client's socket is full (settles on 'drain' or 'close'); null otherwise. */
  readonly drained = (): Promise<void> | null => this.waiting;

  /** Sends the head now, for a stream whose first event may be a while coming (the keep-alive runs from here). */
  start(): void {
    if (!this.opened) this.open();
  }

  /** Ends the stream (opening it first when no event was written: a background response answered `queued`). */
  end(): void {
    this.stop();
    if (!this.opened) this.open();
    if (!this.res.writableEnded) this.res.end();
  }

  /** Stops the keep-alive and releases a wait, without writing (the response failed before its stream opened: the kit answers the error). */
  stop(): void {
    clearInterval(this.timer);
    this.release?.();
  }

  private tick(): void {
    if (++this.quietTicks < 2) return;
    // A full socket is not silent to the edge: the events waiting in it are still to be read.
    if (this.opened && !this.waiting && !this.res.writableEnded && !this.res.destroyed) this.send(': keep-alive\n\n');
  }

  private send(text: string): void {
    if (!this.opened) this.open();
    this.quietTicks = 0;
    if (this.res.writableEnded || this.res.destroyed) return;
    if (!this.res.write(text) && !this.waiting) {
      this.waiting = new Promise<void>((resolve) => {
        const release = () => {
          this.res.off('drain', release);
          this.res.off('close', release);
          this.waiting = this.release = null;
          resolve();
        };
        this.release = release;
        this.res.once('drain', release);
        this.res.once('close', release);
      });
    }
  }

  private open(): void {
    this.opened = true;
    this.res.status(200);
    this.res.setHeader('content-type', 'text/event-stream; charset=utf-8');
    this.res.setHeader('cache-control', 'no-cache');
    this.res.setHeader('x-accel-buffering', 'no');
    this.res.flushHeaders();
  }
}
