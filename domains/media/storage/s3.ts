import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Readable } from 'node:stream';
import { unixSeconds, type Clock } from '../../../services/kit/core/index.js';
import { contentDisposition, ObjectTooLargeError, type ObjectStorage } from './types.js';

/**
 * S3 (or any S3-compatible store). Downloads are presigned GETs (SigV4 query signature, with the
 * stored content type and a Content-Disposition pinned in the signature); direct uploads are
 * presigned PUTs whose Content-Type and Content-Length are signed headers, so the store refuses
 * a body of another size or type. URLs for clients are signed for S3_PUBLIC_ENDPOINT when set.
 */
export interface S3StorageOptions {
  endpoint?: string;
  publicEndpoint?: string;
  bucket: string;
  region: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle: boolean;
  clock: Clock;
  /** Opening a connection to the store (S3_CONNECT_TIMEOUT_MS); default 5000. */
  connectTimeoutMs?: number;
  /** One request, until the answer's headers arrive (S3_REQUEST_TIMEOUT_MS); default 15000. */
  requestTimeoutMs?: number;
}

/**
 * A store that does not answer (or accept a connection) in time is a dependency outage: the
 * error gets the ETIMEDOUT code the kit answers as 503 `service_unavailable` (the SDK's
 * connection timeout has no code of its own).
 */
class S3TimeoutError extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(cause: unknown) {
    super(`S3 did not answer in time: ${(cause as Error).message}`, { cause });
    this.name = 'S3TimeoutError';
  }
}

export function createS3Storage(options: S3StorageOptions): ObjectStorage {
  const credentials =
    options.accessKeyId && options.secretAccessKey ? { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey } : undefined;
  // Without timeouts the SDK waits forever on a store that accepts connections and never answers.
  // Each attempt is bounded; the SDK retries a timed-out attempt (3 attempts in all by default).
  const requestHandler = {
    connectionTimeout: options.connectTimeoutMs ?? 5000,
    requestTimeout: options.requestTimeoutMs ?? 15000,
    throwOnRequestTimeout: true,
  };
  // Checksums only where S3 requires one: by default the SDK signs into a presigned PUT the CRC32
  // of the body it has at signing time, none (`x-amz-checksum-crc32=AAAAAA==`), and S3 (R2, MinIO)
  // then refuses every real upload to that URL as a checksum mismatch. Responses likewise: by
  // default every presigned GET names `x-amz-checksum-mode=ENABLED`, a parameter S3 does not need
  // and some S3-compatible stores refuse or leave out of the signature they check.
  const clientFor = (endpoint?: string) =>
    new S3Client({
      endpoint,
      region: options.region,
      credentials,
      forcePathStyle: options.forcePathStyle,
      systemClockOffset: 0,
      requestHandler,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
  const client = clientFor(options.endpoint);
  client.middlewareStack.add(
    (next) => async (args) => {
      try {
        return await next(args);
      } catch (error) {
        throw (error as Error)?.name === 'TimeoutError' ? new S3TimeoutError(error) : error;
      }
    },
    { step: 'initialize', name: 'timeoutAsUnavailable' },
  );
  const signer = options.publicEndpoint ? clientFor(options.publicEndpoint) : client;
  const Bucket = options.bucket;
  const signingDate = () => new Date(options.clock.now());

  const missing = (error: unknown) => {
    const e = error as { name?: string; $metadata?: { httpStatusCode?: number } };
    return e.name === 'NoSuchKey' || e.name === 'NotFound' || e.$metadata?.httpStatusCode === 404;
  };

  async function open(key: string) {
    try {
      const out = await client.send(new GetObjectCommand({ Bucket, Key: key }));
      return { body: out.Body as Readable, size: Number(out.ContentLength ?? 0) };
    } catch (error) {
      if (missing(error)) return null;
      throw error;
    }
  }

  return {
    driver: 's3',
    async put(key, body, contentType) {
      await client.send(new PutObjectCommand({ Bucket, Key: key, Body: body, ContentType: contentType, ContentLength: body.length }));
    },
    async read(key, maxBytes) {
      const object = await open(key);
      if (!object) return null;
      if (object.size > maxBytes) {
        object.body.destroy();
        throw new ObjectTooLargeError(maxBytes);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of object.body) {
        size += (chunk as Buffer).length;
        if (size > maxBytes) {
          object.body.destroy();
          throw new ObjectTooLargeError(maxBytes);
        }
        chunks.push(chunk as Buffer);
      }
      return Buffer.concat(chunks, size);
    },
    open,
    async delete(key) {
      try {
        await client.send(new DeleteObjectCommand({ Bucket, Key: key }));
      } catch (error) {
        if (!missing(error)) throw error;
      }
    },
    async size(key) {
      try {
        const out = await client.send(new HeadObjectCommand({ Bucket, Key: key }));
        return Number(out.ContentLength ?? 0);
      } catch (error) {
        if (missing(error)) return null;
        throw error;
      }
    },
    async exists(key) {
      try {
        await client.send(new HeadObjectCommand({ Bucket, Key: key }));
        return true;
      } catch (error) {
        if (missing(error)) return false;
        throw error;
      }
    },
    async downloadUrl(key, o) {
      const command = new GetObjectCommand({
        Bucket,
        Key: key,
        ResponseContentType: o.contentType,
        ResponseContentDisposition: contentDisposition(o.filename),
      });
      const url = await getSignedUrl(signer, command, { expiresIn: o.expiresIn, signingDate: signingDate() });
      return { url, expiresAt: unixSeconds(options.clock) + o.expiresIn };
    },
    async uploadUrl(key, o) {
      const command = new PutObjectCommand({ Bucket, Key: key, ContentType: o.contentType, ContentLength: o.bytes });
      const url = await getSignedUrl(signer, command, {
        expiresIn: o.expiresIn,
        signingDate: signingDate(),
        signableHeaders: new Set(['content-type', 'content-length']),
      });
      return {
        url,
        expiresAt: unixSeconds(options.clock) + o.expiresIn,
        method: 'PUT',
        headers: { 'content-type': o.contentType, 'content-length': String(o.bytes) },
      };
    },
    async close() {
      client.destroy();
      if (signer !== client) signer.destroy();
    },
  };
}
