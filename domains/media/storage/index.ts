import { createHmac } from 'node:crypto';
import { join } from 'node:path';
import type { Clock } from '../../../services/kit/core/index.js';
import { loadMasterKey } from '../../../services/kit/data/index.js';
import { storageDriverOf, type MediaConfig } from '../config.js';
import { createFilesystemStorage, createUrlSigner } from './filesystem.js';
import { createS3Storage } from './s3.js';
import type { ObjectStorage } from './types.js';

export * from './types.js';
export { createFilesystemStorage, createUrlSigner, SIGNED_PATH, type UrlSigner } from './filesystem.js';
export { createS3Storage } from './s3.js';
export { failureOf, isStoreServerFault } from './faults.js';

export interface StorageSettings {
  DATA_DIR: string;
  MASTER_KEY?: string;
  GATEWAY_PORT: number;
}

/** The HMAC key of filesystem URLs: MEDIA_SIGNING_SECRET, else derived from the platform's master key. */
export function signingKeyFor(config: MediaConfig, base: StorageSettings): Buffer {
  if (config.MEDIA_SIGNING_SECRET) return Buffer.from(config.MEDIA_SIGNING_SECRET, 'utf8');
  return createHmac('sha256', loadMasterKey(base)).update('media-signed-urls').digest();
}

/** Builds the storage driver the configuration names. */
export function createStorage(config: MediaConfig, base: StorageSettings, clock: Clock): ObjectStorage {
  if (storageDriverOf(config) === 's3') {
    if (!config.S3_BUCKET) throw new Error('S3_BUCKET is required when MEDIA_STORAGE=s3');
    return createS3Storage({
      endpoint: config.S3_ENDPOINT,
      publicEndpoint: config.S3_PUBLIC_ENDPOINT,
      bucket: config.S3_BUCKET,
      region: config.S3_REGION,
      accessKeyId: config.S3_ACCESS_KEY_ID,
      secretAccessKey: config.S3_SECRET_ACCESS_KEY,
      forcePathStyle: config.S3_FORCE_PATH_STYLE,
      connectTimeoutMs: config.S3_CONNECT_TIMEOUT_MS,
      requestTimeoutMs: config.S3_REQUEST_TIMEOUT_MS,
      clock,
    });
  }
  const publicUrl = config.MEDIA_PUBLIC_URL ?? `http://localhost:${base.GATEWAY_PORT}`;
  return createFilesystemStorage({ root: join(base.DATA_DIR, 'media'), publicUrl: () => publicUrl, signer: createUrlSigner(signingKeyFor(config, base)), clock });
}
