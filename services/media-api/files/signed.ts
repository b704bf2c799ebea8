import { pipeline } from 'node:stream';
import type { Request, Response } from 'express';
import { ApiError, unixSeconds, type Clock } from '../../kit/index.js';
import { contentDisposition, KEY_PATTERN, type MediaStore, type ObjectStorage, type UrlSigner } from '../../../domains/media/index.js';

/**
 * The public signed-URL routes of the filesystem driver (`/v1/media/signed/<key>`). They take no
 * credential: the HMAC signature over method, key, expiry, content type, file name and size is
 * the only one, so a tampered or expired URL is refused with 403 before anything is read.
 */
export interface SignedRouteDeps {
  storage: ObjectStorage;
  store: MediaStore;
  clock: Clock;
  signer: UrlSigner;
  maxBytes: number;
}

const keyOf = (req: Request) => {
  const raw = (req.params as { key?: string | string[] }).key;
  return Array.isArray(raw) ? raw.join('/') : String(raw ?? '');
};
const refused = (reason: string) => new ApiError(403, `Signed URL refused: ${reason}`, { param: 'sig' });

export async function serveSigned(deps: SignedRouteDeps, req: Request, res: Response): Promise<void> {
  const key = keyOf(req);
  const reason = deps.signer.verify('GET', key, req.query as Record<string, unknown>, unixSeconds(deps.clock));
  if (reason) throw refused(reason);
  const object = await deps.storage.open(key);
  if (!object) throw new ApiError(404, 'The object no longer exists');
  const query = req.query as Record<string, string>;
  const exp = Number(query.exp);
  res.status(200).set({
    'content-type': query.ct,
    'content-length': String(object.size),
    'content-disposition': contentDisposition(query.fn),
    'cache-control': `private, max-age=${Math.max(0, exp - unixSeconds(deps.clock))}`,
    'x-content-type-options': 'nosniff',
    'content-security-policy': "default-src 'none'; sandbox",
  });
  if (req.method === 'HEAD') {
    object.body.destroy();
    res.end();
    return;
  }
  // pipeline, not pipe: a client that goes away mid-download must release the file descriptor.
  pipeline(object.body, res, () => {});
}

/** A direct upload to the filesystem driver: exactly the signed type and size, while the reservation is open. */
export async function acceptSignedUpload(deps: SignedRouteDeps, req: Request, res: Response): Promise<void> {
  const key = keyOf(req);
  const query = req.query as Record<string, unknown>;
  const reason = deps.signer.verify('PUT', key, query, unixSeconds(deps.clock));
  if (reason || !KEY_PATTERN.test(key) || !key.startsWith('uploads/')) {
    req.resume();
    throw refused(reason ?? 'not an upload URL');
  }
  const declared = Number(query.len);
  if ((req.headers['content-type'] ?? '').toLowerCase() !== String(query.ct)) {
    req.resume();
    throw refused('Content-Type differs from the one the URL was signed for');
  }
  if (Number(req.headers['content-length']) !== declared) {
    req.resume();
    throw refused('Content-Length differs from the one the URL was signed for');
  }
  const id = key.slice('uploads/'.length);
  const row = await deps.store.byId(id);
  if (!row || row.state !== 'pending' || (row.expires_at ?? 0) <= unixSeconds(deps.clock)) {
    req.resume();
    throw refused('the upload is no longer open');
  }
  const limit = Math.min(declared, deps.maxBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        req.destroy();
        throw new ApiError(400, `The upload exceeds the declared ${declared} bytes`, { param: 'body' });
      }
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    if (error instanceof ApiError) throw error;
    // The client closed the connection mid-body (ECONNRESET "aborted"): its fault, not an outage
    // of a dependency, which is how the kit would count a bare connection error (503).
    throw new ApiError(400, 'The upload body could not be read (the connection closed before it ended)', { param: 'body', cause: error });
  }
  // The reservation may have been completed or expired while the body arrived: the write happens
  // under the reservation's row lock, re-checked there, so a complete waits for it and no write
  // lands after one (it would leave a staging file nothing collects, outside the quota).
  const body = Buffer.concat(chunks, size);
  const written = await deps.store.whileReservationOpen(id, unixSeconds(deps.clock), () => deps.storage.put(key, body, String(query.ct)));
  if (!written) throw refused('the upload is no longer open');
  res.status(200).set('content-length', '0').end();
}
