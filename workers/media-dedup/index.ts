import { loadConfig, runEvery, type WorkerDefinition } from '../../services/kit/index.js';
import {
  MEDIA_DEDUP_BINDINGS,
  MEDIA_DEDUP_QUEUE,
  buildIngestDeps,
  mediaConfigShape,
  mediaMigrations,
} from '../../domains/media/index.js';
import { createMediaDedup, type MediaDedupDeps } from './dedup.js';

export { createMediaDedup, type MediaDedupDeps } from './dedup.js';

/**
 * workers/media-dedup: finalises completed direct uploads that arrive by event, collects objects
 * that no media references, and expires reservations that were never completed. Runs in
 * `npm start` (services/platform/registry.ts) or alone (main.ts); several may run at once.
 */
export const mediaDedupWorker: WorkerDefinition = {
  name: 'media-dedup',
  config: mediaConfigShape,
  migrations: [mediaMigrations],
  async start(ctx) {
    const base = ctx.runtime.config;
    const config = loadConfig(mediaConfigShape, base.env);
    const logger = ctx.runtime.logger.child({ worker: 'media-dedup' });
    const ingest = buildIngestDeps(config, base, ctx.runtime.db.knex, ctx.runtime.clock);
    const storage = ingest.storage;
    const deps: MediaDedupDeps = {
      ...ingest,
      graceSeconds: config.MEDIA_GC_GRACE_SECONDS,
      logger,
    };
    const dedup = createMediaDedup(deps);
    const consumer = await ctx.runtime.bus.consume({ queue: MEDIA_DEDUP_QUEUE, bindings: MEDIA_DEDUP_BINDINGS, prefetch: 4 }, dedup.handle as never);

    const sweeps =
      config.MEDIA_SWEEP_INTERVAL_MS > 0
        ? runEvery(
            config.MEDIA_SWEEP_INTERVAL_MS,
            async () => {
              const result = await dedup.sweep();
              if (result.expired || result.finalized || result.collected || result.failed) logger.info(result, 'media sweep');
            },
            (error) => logger.warn({ err: error.message }, 'media sweep failed'),
          )
        : undefined;
    return {
      async stop() {
        await sweeps?.stop();
        await consumer.cancel({ drainMs: 2000 });
        await storage.close();
      },
    };
  },
};
