import { Worker } from 'node:worker_threads';
import { perUserShare } from '../slots.js';
import type { Extracted } from './extract.js';

/**
 * `extractHtml` in worker threads, bounded in time and memory. Readability and the DOM it runs on
 * are synchronous and grow faster than the page: a few KiB of deeply nested elements, or a couple of
 * MiB of links, take seconds to minutes. On the service's own thread that time would stop every
 * other request of the process; here the thread is terminated at the bound.
 *
 * The threads are kept and reused (at most `EXTRACT_THREADS`, one page at a time each, the rest
 * wait their turn): loading the DOM library costs a new thread about half a second of CPU, far
 * more than reading an ordinary page. Only a thread stopped at its bound (or one that failed) is
 * replaced, by a new one when the next page needs it. An idle thread does not keep the process alive.
 *
 * One user reads on at most half of the threads (at least one), as with every other shared bound of
 * mcp-tools: a user scraping many pages that take the whole bound to read would otherwise hold every
 * thread, and every other user's page would wait its turn past its own bound and fail as "too
 * complex". A waiting page of another user goes first; the user's own pages keep their order.
 */
export class ExtractionTimeout extends Error {
  constructor(readonly timeoutMs: number) {
    super(`reading the page took longer than ${timeoutMs} ms`);
    this.name = 'ExtractionTimeout';
  }
}

/** Heap of one thread: a DOM of a page at SCRAPE_MAX_BYTES fits; a pathological one fails instead of growing the service. */
const WORKER_HEAP_MB = 512;
/** Pages read at once per process (each on a thread of its own). */
const EXTRACT_THREADS = 2;
/** Threads one user's pages may hold at once. */
const THREADS_PER_USER = perUserShare(EXTRACT_THREADS);

interface Job {
  input: { html: string; url: string; format: 'text' | 'markdown' };
  userId: string;
  resolve(result: Extracted): void;
  reject(error: unknown): void;
  /** Set once a thread runs it. */
  worker?: Worker;
}

const idle: Worker[] = [];
const queue: Job[] = [];
let running = 0;
/** Threads each user's pages hold now. */
const runningBy = new Map<string, number>();

/**
 * Reads `html` on a thread. `timeoutMs` bounds the whole wait, a turn in the queue included; past
 * it, or when `signal` aborts, the page is given up and the thread reading it (if any) terminated.
 */
export function extractHtmlInThread(
  html: string,
  url: string,
  format: 'text' | 'markdown',
  options: { timeoutMs: number; signal: AbortSignal; userId: string },
): Promise<Extracted> {
  return new Promise((resolve, reject) => {
    if (options.signal.aborted) return reject(options.signal.reason);
    let settled = false;
    const job: Job = {
      input: { html, url, format },
      userId: options.userId,
      resolve: (result) => finish(() => resolve(result)),
      reject: (error) => finish(() => reject(error)),
    };
    const finish = (settle: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
      settle();
    };
    const giveUp = (error: unknown) => {
      if (settled) return;
      const waiting = queue.indexOf(job);
      if (waiting >= 0) queue.splice(waiting, 1);
      // A thread still reading this page is ended; the next page gets a new one.
      else if (job.worker) retire(job);
      job.reject(error);
    };
    const timer = setTimeout(() => giveUp(new ExtractionTimeout(options.timeoutMs)), options.timeoutMs);
    const onAbort = () => giveUp(options.signal.reason);
    options.signal.addEventListener('abort', onAbort, { once: true });
    queue.push(job);
    pump();
  });
}

/** Starts waiting pages on free threads: each time the first page whose user is under their share. */
function pump(): void {
  while (running < EXTRACT_THREADS) {
    const next = queue.findIndex((waiting) => (runningBy.get(waiting.userId) ?? 0) < THREADS_PER_USER);
    if (next < 0) return;
    const job = queue.splice(next, 1)[0]!;
    const worker = idle.pop() ?? spawnWorker();
    running++;
    runningBy.set(job.userId, (runningBy.get(job.userId) ?? 0) + 1);
    job.worker = worker;
    worker.ref();
    const done = (outcome: () => void, reusable: boolean) => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      if (job.worker !== worker) return;
      job.worker = undefined;
      release(job.userId);
      if (reusable) {
        worker.unref();
        idle.push(worker);
      } else void worker.terminate();
      outcome();
      pump();
    };
    const onMessage = (message: { result?: Extracted; error?: string }) =>
      done(() => (message.result ? job.resolve(message.result) : job.reject(new Error(message.error ?? 'the page could not be read'))), true);
    const onError = (error: Error) => done(() => job.reject(error), false);
    const onExit = (code: number) => done(() => job.reject(new Error(`the reader stopped (exit code ${code})`)), false);
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
    worker.postMessage(job.input);
  }
}

/** Ends the thread of a page given up on (it took too long, or its caller left) and frees its place. */
function retire(job: Job): void {
  const worker = job.worker!;
  job.worker = undefined;
  worker.removeAllListeners('message').removeAllListeners('error').removeAllListeners('exit');
  worker.on('error', () => {});
  void worker.terminate();
  release(job.userId);
  queueMicrotask(pump);
}

/** A thread of `userId`'s is free again. */
function release(userId: string): void {
  running--;
  const held = (runningBy.get(userId) ?? 1) - 1;
  if (held > 0) runningBy.set(userId, held);
  else runningBy.delete(userId);
}

/**
 * Compiled: the .js next to this file. Run from source under tsx (tests, `node --import tsx`):
 * the .ts, loaded through tsx registered inside the worker (workers do not inherit `--import` hooks),
 * as the kit's PGlite worker is.
 */
function spawnWorker(): Worker {
  const self = import.meta.url;
  const resourceLimits = { maxOldGenerationSizeMb: WORKER_HEAP_MB };
  let worker: Worker;
  if (!self.endsWith('.ts')) worker = new Worker(new URL('./extract-worker.js', self), { resourceLimits });
  else {
    const entry = new URL('./extract-worker.ts', self).href;
    const tsx = import.meta.resolve('tsx/esm/api');
    const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry)}); });`;
    worker = new Worker(code, { eval: true, resourceLimits });
  }
  // An idle thread's failure (none expected) only drops it from the pool.
  worker.on('error', () => {});
  worker.once('exit', () => {
    const at = idle.indexOf(worker);
    if (at >= 0) idle.splice(at, 1);
  });
  return worker;
}
