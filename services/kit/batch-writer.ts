import { setTimeout as pause } from 'node:timers/promises';
import { isDependencyUnavailable } from './errors.js';
import type { Logger } from './logger.js';

/**
 * Records written off the request path: `push()` only appends to memory; a timer (or a full batch)
 * writes what is queued in batches with `write`. A failed batch goes back to the front and is
 * retried on the next tick (or an explicit `flush()`): while writes fail, a full batch starts no
 * write of its own, so an outage under load is not a write attempt (and a log line) per record
 * pushed; memory is bounded (`maxQueued`, oldest dropped and counted). `stop()` writes what is left.
 *
 * A batch that fails while the database is reachable (`isDependencyUnavailable` false) is retried
 * too, but after `SPLIT_AFTER` such failures in a row it is written one record at a time, and only
 * the records the database still refuses are dropped (logged, counted): one bad record must not
 * keep every later one queued forever. While the database is unavailable nothing is dropped.
 */
export interface BatchWriter<T> {
  push(item: T): void;
  pending(): number;
  flush(): Promise<void>;
  /**
   * A flush without waiting for the tick, for records a reader is waiting on, under the rule a full
   * batch follows: none while a flush is already waiting to start, none while writes fail (the tick
   * retries), so an outage is not one write attempt per request.
   */
  requestFlush(): void;
  stop(): Promise<void>;
}

/** Failures in a row (database reachable) after which a batch is written one record at a time. */
const SPLIT_AFTER = 3;
/** `stopRetryMs`'s waits between tries. */
const STOP_RETRY_FIRST_MS = 100;
const STOP_RETRY_MAX_MS = 1_000;

export function createBatchWriter<T>(options: {
  name: string;
  write: (batch: T[]) => Promise<void>;
  /** Called after each batch was written (e.g. pruning). Its failures are logged, never retried. */
  afterWrite?: () => Promise<unknown>;
  flushMs: number;
  batchSize: number;
  maxQueued: number;
  logger: Logger;
  /**
   * How long `stop()` keeps retrying, after its first three tries, while records are left (the
   * database away during a deploy's restart or failover): waits of 0.1 s doubling to 1 s. 0 (the
   * default): three tries back to back, then what is left is dropped and logged.
   */
  stopRetryMs?: number;
}): BatchWriter<T> {
  const queue: T[] = [];
  let flushing: Promise<void> = Promise.resolve();
  let dropped = 0;
  /** Records the database refused one by one, dropped. */
  let rejected = 0;
  /** Failures in a row of the batch at the front while the database was reachable. */
  let headFailures = 0;
  /** A flush is chained and has not started: a full batch needs no second one. */
  let flushWaiting = false;
  /** The last flush left a batch it could not write: the next tick retries, not the next push. */
  let failing = false;

  async function writeBatch(size: number): Promise<boolean> {
    const batch = queue.splice(0, size);
    try {
      await options.write(batch);
      headFailures = 0;
    } catch (error) {
      if (isDependencyUnavailable(error) || ++headFailures < SPLIT_AFTER) {
        queue.unshift(...batch);
        options.logger.warn({ err: (error as Error).message, queued: queue.length }, `${options.name}: batch not written; will retry`);
        return false;
      }
      headFailures = 0;
      options.logger.warn({ err: (error as Error).message, records: batch.length }, `${options.name}: batch keeps failing; writing its records one at a time`);
      return writeOneByOne(batch);
    }
    await afterWrite();
    return true;
  }

  /** A batch the database keeps refusing, record by record: the refused ones are dropped; if the database goes away meanwhile, the rest is kept. */
  async function writeOneByOne(batch: T[]): Promise<boolean> {
    let written = 0;
    for (let i = 0; i < batch.length; i++) {
      try {
        await options.write([batch[i]!]);
        written++;
      } catch (error) {
        if (isDependencyUnavailable(error)) {
          queue.unshift(...batch.slice(i));
          options.logger.warn({ err: (error as Error).message, queued: queue.length }, `${options.name}: batch not written; will retry`);
          if (written > 0) await afterWrite();
          return false;
        }
        rejected++;
        options.logger.error({ err: (error as Error).message, rejected }, `${options.name}: record refused by the database; dropped`);
      }
    }
    if (written > 0) await afterWrite();
    return true;
  }

  async function afterWrite(): Promise<void> {
    await options.afterWrite?.().catch((error: Error) => options.logger.warn({ err: error.message }, `${options.name}: after-write step failed`));
  }

  /**
   * Writes the records queued when the flush starts, not those that arrive while it writes: they
   * wait for the next tick or a full batch. Draining until empty turned a steady load into a stream
   * of small statements (a batch per write's duration), and each statement pays a fixed cost in the
   * database (the embedded one: ~1.5 ms to plan the usage insert) whatever its size.
   */
  function flush(): Promise<void> {
    flushWaiting = true;
    flushing = flushing.then(async () => {
      flushWaiting = false;
      let left = queue.length;
      while (left > 0) {
        const size = Math.min(left, options.batchSize);
        if (!(await writeBatch(size))) {
          failing = true;
          return;
        }
        left -= size;
      }
      failing = false;
    });
    return flushing;
  }

  function requestFlush(): void {
    if (!flushWaiting && !failing) void flush();
  }

  // The timer runs only while records wait (a failed batch stays queued, so its retry keeps it
  // running): an idle process is not woken every `flushMs` to find nothing to write.
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const tick = async () => {
    await flush();
    timer = undefined;
    if (queue.length > 0) arm();
  };
  function arm(): void {
    if (timer || stopped) return;
    timer = setTimeout(tick, options.flushMs);
    timer.unref();
  }

  return {
    push(item) {
      if (queue.length >= options.maxQueued) {
        queue.shift();
        if (++dropped % 1000 === 1) options.logger.error({ dropped }, `${options.name}: queue full; dropping oldest records`);
      }
      queue.push(item);
      if (queue.length >= options.batchSize) requestFlush();
      arm();
    },
    pending: () => queue.length,
    flush,
    requestFlush,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
      // A flush in flight has taken its batch off the queue: the first flush here waits for it
      // (flushes are chained), then up to two more retry what is left.
      const deadline = Date.now() + (options.stopRetryMs ?? 0);
      let wait = STOP_RETRY_FIRST_MS;
      let tries = 0;
      do {
        if (tries >= 3) {
          if (Date.now() + wait > deadline) break;
          await pause(wait);
          wait = Math.min(wait * 2, STOP_RETRY_MAX_MS);
        }
        await flush();
        tries++;
      } while (queue.length > 0);
      if (queue.length > 0) options.logger.error({ lost: queue.length }, `${options.name}: records could not be written at shutdown`);
    },
  };
}
