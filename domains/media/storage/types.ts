import type { Readable } from 'node:stream';

/**
 * Object storage behind one interface; the driver is chosen by configuration (S3 or the
 * filesystem under DATA_DIR). Keys are `objects/<2 hex>/<sha256>` (content-addressed, sanitised
 * bytes) and `uploads/<media id>` (staging objects of direct uploads).
 */
export interface SignedUrl {
  url: string;
  /** Unix seconds. */
  expiresAt: number;
}

export interface UploadTarget extends SignedUrl {
  method: 'PUT';
  /** Headers the client must send exactly (they are part of the signature). */
  headers: Record<string, string>;
}

export interface StoredObject {
  body: Readable;
  size: number;
}

export interface ObjectStorage {
  readonly driver: 'filesystem' | 's3';
  put(key: string, body: Buffer, contentType: string): Promise<void>;
  /** The whole object, or null when missing. Objects over `maxBytes` throw ObjectTooLargeError. */
  read(key: string, maxBytes: number): Promise<Buffer | null>;
  /** A stream of the object, or null when missing. */
  open(key: string): Promise<StoredObject | null>;
  /**
   * The object's size in bytes, from its metadata only (S3 HeadObject, a file's stat), or null
   * when missing: for answers that need the size and not the bytes, such as HEAD.
   */
  size(key: string): Promise<number | null>;
  /** Idempotent: deleting a missing object succeeds. */
  delete(key: string): Promise<void>;
  exists(key: string): Promise<boolean>;
  /**
   * Removes what writes cut short by a crash left behind (the filesystem driver's temporary files
   * older than STALE_TEMP_MS); returns how many. Drivers that leave nothing behind do not have it.
   */
  removeStaleTemporaries?(): Promise<number>;
  downloadUrl(key: string, options: { expiresIn: number; contentType: string; filename?: string | null }): Promise<SignedUrl>;
  uploadUrl(key: string, options: { expiresIn: number; contentType: string; bytes: number }): Promise<UploadTarget>;
  close(): Promise<void>;
}

export class ObjectTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`object exceeds ${maxBytes} bytes`);
    this.name = 'ObjectTooLargeError';
  }
}

export const objectKey = (sha256: string) => `objects/${sha256.slice(0, 2)}/${sha256}`;
export const uploadKey = (mediaId: string) => `uploads/${mediaId}`;
export const KEY_PATTERN = /^(objects\/[0-9a-f]{2}\/[0-9a-f]{64}|uploads\/jan_[0-9a-z]{26})$/;

/** `inline; filename="…"` with a plain-ASCII fallback and the RFC 5987 form for the rest. */
export function contentDisposition(filename?: string | null): string {
  if (!filename) return 'inline';
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `inline; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(filename)}`;
}
