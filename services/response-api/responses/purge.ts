import { runEvery, type Clock, type Logger } from '../../kit/index.js';
import { endedRow } from './ended.js';
import type { ResponseStore } from './store.js';

/** What a response left running by a stopped process ends with. */
export const INTERRUPTED_ERROR = { code: 'server_error', message: 'The response was interrupted: the process running it stopped before it ended' };

/**
 * Removes expired responses every `intervalMs` after the last pass ended, the first pass at start
 * (0: only when `run` is called), and the kept events of background responses that ended more than
 * `eventsKeptMs` ago. Each pass also marks `failed` the responses still queued or
 * running `interruptedAfterMs` after their creation (longer than any loop runs: the process that
 * ran them crashed), so none stays `in_progress` for good (nor any of its items: `endedRow`), and a
 * chain from one continues from the output it had produced. Concurrent calls to `run` share the pass
 * in progress; `stop` waits for it.
 */
export function startRetentionPurge(options: { store: ResponseStore; clock: Clock; logger: Logger; intervalMs: number; interruptedAfterMs?: number; eventsKeptMs?: number }) {
  let running: Promise<number> | null = null;
  const pass = async () => {
    const now = options.clock.now();
    // A purged response's kept events go with it (the table's cascade).
    const removed = await options.store.purgeExpired(new Date(now));
    if (removed > 0) options.logger.info({ removed }, 'expired responses purged');
    if (options.eventsKeptMs) {
      const events = await options.store.purgeEndedEvents(new Date(now - options.eventsKeptMs));
      if (events > 0) options.logger.info({ events }, 'kept events of ended background responses dropped');
    }
    if (options.interruptedAfterMs) {
      const interrupted = await options.store.endStale(new Date(now - options.interruptedAfterMs), (row) => endedRow(row, { status: 'failed', error: INTERRUPTED_ERROR }));
      if (interrupted > 0) options.logger.warn({ interrupted }, 'responses left running by a stopped process marked failed');
    }
    return removed;
  };
  const run = () => (running ??= pass().finally(() => (running = null)));
  const periodic = options.intervalMs > 0 ? runEvery(options.intervalMs, run, (error) => options.logger.warn({ err: error.message }, 'response purge failed'), { immediate: true }) : null;
  return {
    run,
    async stop() {
      await periodic?.stop();
      await running?.catch(() => {});
    },
  };
}
