// The media domain, shared by services/media-api and workers/media-dedup: tables, store, storage
// drivers, image processing, the storage pipeline, event and queue names, settings.
export * from './config.js';
export * from './events.js';
export * from './ids.js';
export * from './ingest.js';
export * from './ingest-deps.js';
export * from './migrations.js';
export * from './store.js';
export * from './storage/index.js';
export { MediaRejection, sanitizeImage, pixelLimitOf, createDecodeSlots, type SanitizedImage, type SanitizeLimits } from './processing/sanitize.js';
export { looksLikeImage } from './processing/sniff.js';
