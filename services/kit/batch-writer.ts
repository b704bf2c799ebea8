import type { Logger } from './logger.js';

/**
 * Records written off the request path: `push()` only appends to memory; a timer (or a full batch)
 * writes them in batches with `write`. A failed batch goes back to the front and is retried on the
 * next tick; memory is bounded (`maxQueued`, oldest dropped and counted). `stop()` writes what is left.
 */
export interface BatchWriter<T> {
  push(item: T): void;
  pending(): number;
  flush(): Promise<void>;
  stop(): Promise<void>;
}

export function createBatchWriter<T>(options: {
  name: string;
  write: (batch: T[]) => Promise<void>;
  /** Called after each batch was written (e.g. pruning). Its failures are logged, never retried. */
  afterWrite?: () => Promise<unknown>;
  flushMs: number;
  batchSize: number;
  maxQueued: number;
  logger: Logger;
}): BatchWriter<T> {
  const queue: T[] = [];
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();
  let dropped = 0;

  async function writeBatch(): Promise<boolean> {
    const batch = queue.splice(0, options.batchSize);
    try {
      await options.write(batch);
    } catch (error) {
      queue.unshift(...batch);
      options.logger.warn({ err: (error as Error).message, queued: queue.length }, `${options.name}: batch not written; will retry`);
      return false;
    }
    await options.afterWrite?.().catch((error: Error) => options.logger.warn({ err: error.message }, `${options.name}: after-write step failed`));
    return true;
  }

  function flush(): Promise<void> {
    flushing = flushing.then(async () => {
      while (queue.length > 0 && (await writeBatch()));
    });
    return flushing;
  }

  function schedule() {
    timer = setTimeout(() => void flush().finally(() => timer && schedule()), options.flushMs);
    timer.unref();
  }
  schedule();

  return {
    push(item) {
      if (queue.length >= options.maxQueued) {
        queue.shift();
        if (++dropped % 1000 === 1) options.logger.error({ dropped }, `${options.name}: queue full; dropping oldest records`);
      }
      queue.push(item);
      if (queue.length >= options.batchSize) void flush();
    },
    pending: () => queue.length,
    flush,
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      for (let i = 0; i < 3 && queue.length > 0; i++) await flush();
      if (queue.length > 0) options.logger.error({ lost: queue.length }, `${options.name}: records could not be written at shutdown`);
    },
  };
}
