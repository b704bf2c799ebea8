import { createServiceApp, serviceAppOptions, loadConfig, type ServiceDefinition } from '../kit/index.js';
import { declareMediaDedupQueue, mediaMigrations } from '../../domains/media/index.js';
import { mediaConfigShape } from './config.js';
import { buildMediaDeps, type MediaApiDeps } from './deps.js';
import { mediaRoutes } from './media/routes.js';

/** Media API: image uploads, object storage, `jan_` media ids, presigned URLs, per-user dedup. */
export const mediaApiService: ServiceDefinition = {
  name: 'media-api',
  port: (config) => config.MEDIA_API_PORT,
  config: mediaConfigShape,
  routeTable: () => mediaApiRoutes(),
  aliases: ['/llm'],
  migrations: [mediaMigrations],
  async createApp(ctx) {
    // The dedup worker's queue exists before this service records its first event.
    await declareMediaDedupQueue(ctx.runtime.bus);
    const deps: MediaApiDeps = buildMediaDeps(ctx);
    // Temporary files a crash left behind go at start-up too, not only when the media-dedup
    // worker's sweep (which may run elsewhere, or not yet) gets to them. Never delays start-up.
    deps.media.storage.removeStaleTemporaries?.().then(
      (removed: number) => removed > 0 && ctx.runtime.logger.info({ temporaries: removed }, 'media: removed temporary files left by interrupted writes'),
      (error: Error) => ctx.runtime.logger.warn({ err: error.message }, 'media: removing stale temporary files failed'),
    );
    return createServiceApp({
      ...serviceAppOptions(ctx, 'media-api'),
      routeTable: mediaRoutes(() => deps, { maxBytes: deps.config.MEDIA_MAX_BYTES, jsonMaxDepth: ctx.runtime.config.JSON_MAX_DEPTH }),
      // `/llm/v1/media/...` and `/v1/media/...` are the same endpoints (as on llm-api and mcp-tools).
      aliases: ['/llm'],
    });
  },
};

/** The route table without a running service (OpenAPI document, docs/api.md). */
export const mediaApiRoutes = () =>
  mediaRoutes(
    () => {
      throw new Error('route table built for documentation only');
    },
    { maxBytes: loadConfig(mediaConfigShape, {}).MEDIA_MAX_BYTES },
  );
