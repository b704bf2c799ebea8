import type { Clock, Logger } from '../../kit/index.js';
import type { ResponseStore } from './store.js';

/** Removes expired responses every `intervalMs` (0: only when `run` is called). */
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
  const timer = options.intervalMs > 0 ? setInterval(() => void run().catch((error) => options.logger.warn({ err: (error as Error).message }, 'response purge failed')), options.intervalMs) : null;
  timer?.unref();
  return {
    run,
    async stop() {
      if (timer) clearInterval(timer);
      await running?.catch(() => {});
    },
  };
}
