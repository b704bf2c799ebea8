import { z } from 'zod';
import { bool, optionalUrl } from '../../services/kit/settings/index.js';

/**
 * Settings of the media service and the media-dedup worker (both read the same shape with the
 * kit's `loadConfig(mediaConfigShape, config.env)`). Documented in README.md ("Media API").
 */
const MiB = 1024 * 1024;
const bytes = (fallback: number) => z.coerce.number().int().min(0).default(fallback);
const MIME_TYPES = ['image/jpeg', 'image/png', 'image/webp', 'image/gif'] as const;
/**
 * Longest MEDIA_GC_GRACE_SECONDS: the media-dedup worker sends an event for an object still within
 * its grace period back onto the bus after grace + GC_RETRY_MARGIN_MS (`workers/media-dedup/dedup.ts`),
 * a delay queue's message TTL on RabbitMQ, kept within 2^32-1 ms (about 49.7 days): current brokers
 * refuse a TTL above ten years, and older ones took larger values but their queue process crashed
 * on a timer over 2^32-1 ms.
 */
export const GC_RETRY_MARGIN_MS = 1000;
export const MAX_GC_GRACE_SECONDS = Math.floor((2 ** 32 - 1 - GC_RETRY_MARGIN_MS) / 1000);

export const mediaConfigShape = {
  /** `filesystem` (under DATA_DIR) or `s3`; unset: `s3` when S3_BUCKET is set, else `filesystem`. */
  MEDIA_STORAGE: z.enum(['filesystem', 's3']).optional(),
  MEDIA_MAX_BYTES: bytes(20 * MiB).pipe(z.number().min(1)),
  /** Width × height (× frames) above which an image is refused before it is decoded; GIF and WebP get half (`pixelLimitOf`). */
  MEDIA_MAX_PIXELS: z.coerce.number().int().min(1).default(50_000_000),
  MEDIA_ALLOWED_TYPES: z
    .string()
    .default(MIME_TYPES.join(','))
    .transform((value) => value.split(',').map((part) => part.trim().toLowerCase()).filter(Boolean))
    .pipe(z.array(z.enum(MIME_TYPES, { error: `each type must be one of ${MIME_TYPES.join(', ')}` })).min(1)),
  /** Bytes a user may hold (stored media plus open upload reservations); 0 = unlimited. */
  MEDIA_QUOTA_BYTES_PER_USER: bytes(1024 * MiB),
  /** Lifetime of download URLs when the caller names none. */
  MEDIA_URL_TTL_SECONDS: z.coerce.number().int().min(1).max(604800).default(900),
  /** Longest `expires_in` a caller may ask for (SigV4 allows at most 7 days). */
  MEDIA_URL_MAX_TTL_SECONDS: z.coerce.number().int().min(1).max(604800).default(86400),
  /** Lifetime of a direct-upload reservation and its upload URL. */
  MEDIA_UPLOAD_TTL_SECONDS: z.coerce.number().int().min(10).max(604800).default(900),
  MEDIA_FETCH_TIMEOUT_MS: z.coerce.number().int().min(100).default(15000),
  MEDIA_FETCH_MAX_REDIRECTS: z.coerce.number().int().min(0).max(10).default(3),
  MEDIA_JPEG_QUALITY: z.coerce.number().int().min(1).max(100).default(90),
  /** Images decoded at once per process (bounds memory: each decode holds a full bitmap). */
  MEDIA_PROCESSING_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(2),
  /**
   * Uploads that may wait for a decode slot per process; past it an upload is a 503 (retry). Each
   * waiting upload holds its bytes (up to MEDIA_MAX_BYTES), so this bounds that memory.
   */
  MEDIA_PROCESSING_QUEUE: z.coerce.number().int().min(0).max(10_000).default(32),
  /** Public base of the filesystem driver's signed URLs; unset: http://localhost:<GATEWAY_PORT>. */
  MEDIA_PUBLIC_URL: optionalUrl,
  /** HMAC key of the filesystem driver's signed URLs; unset: derived from MASTER_KEY. */
  MEDIA_SIGNING_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  /**
   * An unreferenced object younger than this is kept (an upload may be about to reference it). The
   * worker waits this long (plus a second) on the bus before collecting such an object again, a
   * message TTL on RabbitMQ: bounded here (`MAX_GC_GRACE_SECONDS`), so a larger value fails at start.
   */
  MEDIA_GC_GRACE_SECONDS: z.coerce
    .number()
    .int()
    .min(0)
    .max(MAX_GC_GRACE_SECONDS, `must be at most ${MAX_GC_GRACE_SECONDS} seconds (about 49.7 days, the longest message delay every RabbitMQ version can hold)`)
    .default(300),
  /** How often the worker expires reservations and collects unreferenced objects; 0 = only on events. */
  MEDIA_SWEEP_INTERVAL_MS: z.coerce.number().int().min(0).default(60000),
  S3_ENDPOINT: optionalUrl,
  /** Endpoint written into URLs handed to clients (e.g. a public name for an internal endpoint). */
  S3_PUBLIC_ENDPOINT: optionalUrl,
  S3_BUCKET: z.string().min(3).optional(),
  S3_REGION: z.string().min(1).default('us-east-1'),
  S3_ACCESS_KEY_ID: z.string().min(1).optional(),
  S3_SECRET_ACCESS_KEY: z.string().min(1).optional(),
  S3_FORCE_PATH_STYLE: bool(false),
  /** Opening a connection to the store; past it the call fails (503). */
  S3_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(1).default(5000),
  /** One request to the store until its answer starts; past it the call fails (503). */
  S3_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(1).default(15000),
};

export type MediaConfig = z.infer<z.ZodObject<typeof mediaConfigShape>>;

export function storageDriverOf(config: MediaConfig): 'filesystem' | 's3' {
  return config.MEDIA_STORAGE ?? (config.S3_BUCKET ? 's3' : 'filesystem');
}
