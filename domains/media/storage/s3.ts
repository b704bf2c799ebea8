import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Readable } from 'node:stream';
import type { Clock } from '../../../services/kit/core/index.js';
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
}

export function createS3Storage(options: S3StorageOptions): ObjectStorage {
  const credentials =
    options.accessKeyId && options.secretAccessKey ? { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey } : undefined;
  const clientFor = (endpoint?: string) =>
    new S3Client({ endpoint, region: options.region, credentials, forcePathStyle: options.forcePathStyle, systemClockOffset: 0 });
  const client = clientFor(options.endpoint);
  const signer = options.publicEndpoint ? clientFor(options.publicEndpoint) : client;
  const Bucket = options.bucket;
  const nowSeconds = () => Math.floor(options.clock.now() / 1000);
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
      return { url, expiresAt: nowSeconds() + o.expiresIn };
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
        expiresAt: nowSeconds() + o.expiresIn,
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
