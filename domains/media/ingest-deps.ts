import type { Knex } from 'knex';
import type { Clock } from '../../services/kit/core/index.js';
import type { MediaConfig } from './config.js';
import type { IngestDeps } from './ingest.js';
import { createDecodeSlots } from './processing/sanitize.js';
import { createMediaStore } from './store.js';
import { createStorage, type StorageSettings } from './storage/index.js';

/**
 * The storage pipeline's dependencies as media-api and the media-dedup worker both build them
 * from the media settings: the store, the storage driver (the caller closes it on stop), the
 * decode limits and slots, the per-user quota.
 */
export function buildIngestDeps(config: MediaConfig, base: StorageSettings, knex: Knex, clock: Clock): IngestDeps {
  return {
    store: createMediaStore(knex),
    storage: createStorage(config, base, clock),
    clock,
    limits: {
      maxBytes: config.MEDIA_MAX_BYTES,
      maxPixels: config.MEDIA_MAX_PIXELS,
      allowedTypes: config.MEDIA_ALLOWED_TYPES,
      jpegQuality: config.MEDIA_JPEG_QUALITY,
    },
    quotaBytes: config.MEDIA_QUOTA_BYTES_PER_USER,
    withSlot: createDecodeSlots(config.MEDIA_PROCESSING_CONCURRENCY),
    maxDecodeWaiting: config.MEDIA_PROCESSING_QUEUE,
  };
}
