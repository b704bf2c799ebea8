import type { Knex } from 'knex';
import type { Clock, Logger } from '../../kit/index.js';

/**
 * The end of the path from "delete" to "gone": a soft-deleted conversation (404 for every API call
 * from the moment it is deleted) is physically erased, with its branches and items, once it has
 * been deleted for `afterDays`. Several llm-api processes may run the job at once: each batch
 * claims its rows with `FOR UPDATE SKIP LOCKED`, so two processes never work on the same
 * conversation and neither waits for the other.
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
    const erased = await options.knex.transaction(async (trx) => {
      const ids: string[] = await trx('conversations')
        .whereNotNull('deleted_at')
        .where('deleted_at', '<=', cutoff)
        .orderBy('deleted_at', 'asc')
        .limit(batchSize)
        .forUpdate()
        .skipLocked()
        .pluck('id');
      if (ids.length === 0) return 0;
      const branches = trx('conversation_branches').select('id').whereIn('conversation_id', ids);
      await trx('branch_items').whereIn('branch_id', branches).delete();
      await trx('conversation_branches').whereIn('conversation_id', ids).delete();
      await trx('conversation_items').whereIn('conversation_id', ids).delete();
      await trx('conversations').whereIn('id', ids).delete();
      return ids.length;
    });
    total += erased;
    if (erased < batchSize) return total;
  }
}

/** Runs the purge every `intervalMs` (and once at start); `stop` waits for a run in progress. */
export function startPurgeJob(options: PurgeOptions & { intervalMs: number; logger: Logger }): { stop(): Promise<void> } {
  if (options.afterDays <= 0) return { stop: async () => {} };
  let running: Promise<void> = Promise.resolve();
  let stopped = false;
  const run = () => {
    if (stopped) return;
    running = running.then(async () => {
      try {
        const erased = await purgeDeletedConversations(options);
        if (erased > 0) options.logger.info({ erased, after_days: options.afterDays }, 'deleted conversations erased');
      } catch (error) {
        options.logger.warn({ err: (error as Error).message }, 'conversation purge failed; retrying at the next interval');
      }
    });
  };
  const timer = setInterval(run, options.intervalMs);
  timer.unref();
  run();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
