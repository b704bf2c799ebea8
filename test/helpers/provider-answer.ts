import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { CancelSignal } from '../../services/kit/index.js';
import { ProviderAnswer } from '../../services/llm-api/routing/provider-answer.js';

/**
 * undici's side of one dispatch, played by hand: it records what the answer asked of the
 * connection (pause, resume, abort) and, like undici, reports an abort back as the request's error.
 */
export class FakeController implements Dispatcher.DispatchController {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  resumes = 0;
  /** What a real connection does on abort besides reporting it (a test's body is destroyed). */
  onAbort: (reason: Error) => void = () => {};
  answer: ProviderAnswer | undefined;

  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.onAbort(reason);
    this.answer?.onResponseError(this, reason);
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.resumes += 1;
  }
}

/** A provider answer whose head has arrived, fed by hand: `push` a chunk, `end` it or `fail` it. */
export function fedAnswer(head: { status?: number; headers?: IncomingHttpHeaders; signal?: CancelSignal } = {}) {
  const answer = new ProviderAnswer(head.signal);
  const controller = new FakeController();
  controller.answer = answer;
  answer.onRequestStart(controller);
  answer.onResponseStart(controller, head.status ?? 200, head.headers ?? {});
  return {
    answer,
    controller,
    push: (chunk: string | Uint8Array) => answer.onResponseData(controller, Buffer.from(chunk)),
    end: () => answer.onResponseEnd(),
    fail: (error: Error) => answer.onResponseError(controller, error),
  };
}

/**
 * A provider answer whose body is `body`'s bytes as they come: its end is the answer's end, its
 * error or a close before the end is the answer's failure (as a cut connection is in undici), and
 * cutting the answer destroys `body`.
 */
export function answerFrom(body: Readable, head: { status?: number; headers?: IncomingHttpHeaders } = {}): ProviderAnswer {
  const fed = fedAnswer(head);
  let ended = false;
  fed.controller.onAbort = () => body.destroy();
  body.on('data', (chunk: Uint8Array) => {
    if (!fed.controller.aborted) fed.push(chunk);
  });
  body.on('end', () => {
    ended = true;
    if (!fed.controller.aborted) fed.end();
  });
  body.on('error', (error) => {
    if (!fed.controller.aborted) fed.fail(error);
  });
  body.on('close', () => {
    if (!ended && !fed.controller.aborted) fed.fail(Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }));
  });
  return fed.answer;
}
