import type { Knex } from 'knex';
import { runEvery, type Clock, type Logger, type Periodic } from '../../kit/index.js';
import { purgeDeletedBatch } from './store.js';

/**
 * The end of the path from "delete" to "gone": a soft-deleted conversation (404 for every API call
 * from the moment it is deleted) is physically erased, with its branches and items, once it has
 * been deleted for `afterDays`. Several llm-api processes may run the job at once: each batch
 * claims its rows with `FOR UPDATE SKIP LOCKED` (see the store's `purgeDeletedBatch`), so two
 * processes never work on the same conversation and neither waits for the other.
 */
export interface PurgeOptions {
  knex: Knex;
  clock: Clock;
  afterDays: number;
  /** Conversations erased per transaction. */
  batchSize?: number;
}

const DAY_SECONDS = 86_400;

/** Erases every conversation deleted more than `afterDays` ago; returns how many. */
export async function purgeDeletedConversations(options: PurgeOptions): Promise<number> {
  if (options.afterDays <= 0) return 0;
  const cutoff = Math.floor(options.clock.now() / 1000) - options.afterDays * DAY_SECONDS;
  const batchSize = options.batchSize ?? 100;
  let total = 0;
  for (;;) {
    const erased = await purgeDeletedBatch(options.knex, cutoff, batchSize);
    total += erased;
    if (erased < batchSize) return total;
  }
}

/** Runs the purge once at start, then every `intervalMs` after the last run ended; `stop` waits for a run in progress. */
export function startPurgeJob(options: PurgeOptions & { intervalMs: number; logger: Logger }): Periodic {
  if (options.afterDays <= 0) return { stop: async () => {} };
  return runEvery(
    options.intervalMs,
    async () => {
      const erased = await purgeDeletedConversations(options);
      if (erased > 0) options.logger.info({ erased, after_days: options.afterDays }, 'deleted conversations erased');
    },
    (error) => options.logger.warn({ err: error.message }, 'conversation purge failed; retrying at the next interval'),
    { immediate: true },
  );
}
