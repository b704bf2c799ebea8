import { createEgressGuard, loadConfig, type ServiceContext } from '../kit/index.js';
import { buildIngestDeps, createUrlSigner, signingKeyFor, storageDriverOf } from '../../domains/media/index.js';
import { mediaConfigShape, type MediaConfig } from './config.js';
import type { MediaDeps } from './media/media.js';
import type { SignedRouteDeps } from './files/signed.js';
import { withStoreOutages } from './media/storage-outage.js';

/** The composition root of media-api: settings parsed once, drivers built once, per app instance. */
export interface MediaApiDeps {
  config: MediaConfig;
  media: MediaDeps;
  signed: SignedRouteDeps | null;
}

export function buildMediaDeps(ctx: ServiceContext): MediaApiDeps {
  const base = ctx.runtime.config;
  const config = loadConfig(mediaConfigShape, base.env);
  const clock = ctx.runtime.clock;
  const ingest = buildIngestDeps(config, base, ctx.runtime.db.knex, clock);
  const storage = withStoreOutages(ingest.storage);
  ctx.onStop(() => storage.close());
  const media: MediaDeps = {
    ...ingest,
    storage,
    logger: ctx.runtime.logger,
    guard: createEgressGuard({ allowHosts: base.EGRESS_ALLOW_HOSTS }),
    sources: { maxBytes: config.MEDIA_MAX_BYTES, fetchTimeoutMs: config.MEDIA_FETCH_TIMEOUT_MS, maxRedirects: config.MEDIA_FETCH_MAX_REDIRECTS },
    urlTtlSeconds: Math.min(config.MEDIA_URL_TTL_SECONDS, config.MEDIA_URL_MAX_TTL_SECONDS),
    urlMaxTtlSeconds: config.MEDIA_URL_MAX_TTL_SECONDS,
    uploadTtlSeconds: config.MEDIA_UPLOAD_TTL_SECONDS,
  };
  const signed =
    storageDriverOf(config) === 'filesystem' ? { storage, store: media.store, clock, signer: createUrlSigner(signingKeyFor(config, base)), maxBytes: config.MEDIA_MAX_BYTES } : null;
  return { config, media, signed };
}
