import { runEvery, type Clock, type Logger } from '../../kit/index.js';
import type { ResponseStore } from './store.js';

/**
 * Removes expired responses every `intervalMs` after the last pass ended (0: only when `run` is
 * called). Concurrent calls to `run` share the pass in progress; `stop` waits for it.
 */
export function startRetentionPurge(options: { store: ResponseStore; clock: Clock; logger: Logger; intervalMs: number }) {
  let running: Promise<number> | null = null;
  const run = () =>
    (running ??= options.store
      .purgeExpired(new Date(options.clock.now()))
      .then((removed) => {
        if (removed > 0) options.logger.info({ removed }, 'expired responses purged');
        return removed;
      })
      .finally(() => (running = null)));
  const periodic = options.intervalMs > 0 ? runEvery(options.intervalMs, run, (error) => options.logger.warn({ err: error.message }, 'response purge failed')) : null;
  return {
    run,
    async stop() {
      await periodic?.stop();
      await running?.catch(() => {});
    },
  };
}
