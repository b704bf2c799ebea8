import type { Knex } from 'knex';
import { ApiError, listEnvelope, recordEvent, unixSeconds, type Clock, type EgressGuard, type Page } from '../../kit/index.js';
import {
  MEDIA_DELETED,
  MEDIA_UPLOAD_COMPLETED,
  finalizeUpload,
  isMediaId,
  newMediaId,
  objectKey,
  rejectionError,
  sanitize,
  storeImage,
  uploadKey,
  checkQuota,
  type IngestDeps,
  type MediaRow,
  type StoredMedia,
} from '../../../domains/media/index.js';
import type { MediaObject } from './schemas.js';
import { cleanFilename, decodeBase64Source, decodeDataUrl, fetchSource, type SourceLimits } from './sources.js';

/**
 * Domain functions of the Media API: `(deps, userId, input)`; no request, no SQL (the store has
 * it). Every lookup is scoped to the caller: another user's id is answered like an unknown one.
 */
export interface MediaDeps extends IngestDeps {
  guard: EgressGuard;
  sources: SourceLimits;
  urlTtlSeconds: number;
  urlMaxTtlSeconds: number;
  uploadTtlSeconds: number;
  clock: Clock;
}

export type UploadSource =
  | { type: 'url'; url: string }
  | { type: 'base64'; data: string; mime_type?: string }
  | { type: 'data_url'; data_url: string }
  | { type: 'bytes'; bytes: Buffer };

export const notFoundMedia = (id: string, param = 'id') => new ApiError(404, `No media found with id '${id.slice(0, 100)}'`, { param });

export async function present(deps: MediaDeps, row: MediaRow, deduped = false, expiresIn = deps.urlTtlSeconds): Promise<MediaObject> {
  const link = await deps.storage.downloadUrl(objectKey(row.sha256!), { expiresIn, contentType: row.mime_type, filename: row.filename });
  return {
    id: row.id,
    object: 'media',
    mime_type: row.mime_type,
    bytes: row.bytes,
    width: row.width ?? 0,
    height: row.height ?? 0,
    sha256: row.sha256!,
    deduped,
    filename: row.filename,
    created_at: row.created_at,
    url: link.url,
    url_expires_at: link.expiresAt,
  };
}

async function readSource(deps: MediaDeps, source: UploadSource, signal: AbortSignal): Promise<Buffer> {
  const max = deps.limits.maxBytes;
  switch (source.type) {
    case 'url':
      return fetchSource(deps.guard, source.url, deps.sources, signal);
    case 'base64':
      return decodeBase64Source(source.data, max, 'source.data');
    case 'data_url':
      return decodeDataUrl(source.data_url, max, 'source.data_url');
    case 'bytes':
      return source.bytes;
  }
}

export async function uploadMedia(
  deps: MediaDeps,
  userId: string,
  input: { source: UploadSource; filename?: string | null },
  signal: AbortSignal,
): Promise<{ media: MediaObject; deduped: boolean }> {
  const bytes = await readSource(deps, input.source, signal);
  const param = input.source.type === 'bytes' ? 'file' : input.source.type === 'url' ? 'source.url' : input.source.type === 'base64' ? 'source.data' : 'source.data_url';
  const image = await sanitize(deps, bytes, true).catch((error) => {
    throw rejectionError(error, param);
  });
  const stored = await storeImage(deps, userId, image, cleanFilename(input.filename ?? null), param);
  return { media: await present(deps, stored.row, stored.deduped), deduped: stored.deduped };
}

export async function getMedia(deps: MediaDeps, userId: string, id: string): Promise<MediaObject> {
  const row = isMediaId(id) ? await deps.store.readyOf(userId, id) : null;
  if (!row) throw notFoundMedia(id);
  return present(deps, row);
}

export async function listMedia(deps: MediaDeps, userId: string, page: Page) {
  const { rows, total } = await deps.store.list(userId, page);
  return listEnvelope(await Promise.all(rows.map((row) => present(deps, row))), total, page);
}

export async function deleteMedia(deps: MediaDeps, userId: string, id: string) {
  const row = isMediaId(id) ? await deps.store.byId(id) : null;
  if (!row || row.user_id !== userId) throw notFoundMedia(id);
  if (row.state === 'pending') {
    // An open direct-upload reservation is cancelled: its staging object and its quota go now.
    const cancelled = await deps.store.deletePending(userId, id, () => deps.storage.delete(row.upload_key ?? uploadKey(id)));
    if (!cancelled) throw notFoundMedia(id);
    return { id, object: 'media.deleted' as const, deleted: true as const };
  }
  if (row.state !== 'ready') throw notFoundMedia(id);
  // A direct upload whose finalisation stopped before removing its staging object: once the row is
  // gone no sweep finds that object any more, so it goes first (idempotent, like the sweep's own).
  if (row.upload_key) await deps.storage.delete(row.upload_key);
  const deleted = await deps.store.transaction(async (trx: Knex.Transaction) => {
    const removed = await deps.store.deleteReady(trx, userId, id);
    if (removed) await recordEvent(trx, MEDIA_DELETED, { media_id: removed.id, sha256: removed.sha256 });
    return removed;
  });
  if (!deleted) throw notFoundMedia(id);
  return { id, object: 'media.deleted' as const, deleted: true as const };
}

/** Opens the bytes of a user's media for `GET /v1/media/{id}/content`. */
export async function openContent(deps: MediaDeps, userId: string, id: string) {
  const row = isMediaId(id) ? await deps.store.readyOf(userId, id) : null;
  if (!row) throw notFoundMedia(id);
  const object = await deps.storage.open(objectKey(row.sha256!));
  if (!object) throw new ApiError(500, 'The stored object is missing');
  return { row, object };
}

/** What `openContent` answers, without the bytes: the object's size from its metadata only. */
export async function statContent(deps: MediaDeps, userId: string, id: string) {
  const row = isMediaId(id) ? await deps.store.readyOf(userId, id) : null;
  if (!row) throw notFoundMedia(id);
  const size = await deps.storage.size(objectKey(row.sha256!));
  if (size === null) throw new ApiError(500, 'The stored object is missing');
  return { row, size };
}

export async function presignDownload(deps: MediaDeps, userId: string, input: { media_id: string; expires_in?: number }) {
  const expiresIn = input.expires_in ?? deps.urlTtlSeconds;
  if (expiresIn > deps.urlMaxTtlSeconds) {
    throw new ApiError(400, `expires_in must be at most ${deps.urlMaxTtlSeconds} seconds`, { param: 'expires_in' });
  }
  const row = isMediaId(input.media_id) ? await deps.store.readyOf(userId, input.media_id) : null;
  if (!row) throw notFoundMedia(input.media_id, 'media_id');
  const link = await deps.storage.downloadUrl(objectKey(row.sha256!), { expiresIn, contentType: row.mime_type, filename: row.filename });
  return { id: row.id, object: 'media.url' as const, url: link.url, expires_at: link.expiresAt };
}

/** How long after its expiry an upload URL's key is deleted once more (clock skew with the store). */
const STAGING_MARGIN_SECONDS = 300;

/**
 * Reserves a media id for a direct upload: the declared size counts against the quota until the
 * reservation is completed or expires. The upload URL only accepts exactly the declared type and size.
 */
export async function reserveUpload(deps: MediaDeps, userId: string, input: { mime_type: string; bytes: number; filename?: string }) {
  const mimeType = input.mime_type.toLowerCase();
  if (!deps.limits.allowedTypes.includes(mimeType)) {
    throw new ApiError(400, `Unsupported image type ${input.mime_type}; allowed: ${deps.limits.allowedTypes.join(', ')}`, { param: 'mime_type' });
  }
  if (input.bytes > deps.limits.maxBytes) {
    throw new ApiError(400, `The image exceeds the size limit of ${deps.limits.maxBytes} bytes`, { param: 'bytes' });
  }
  const id = newMediaId(deps.clock);
  const expiresAt = unixSeconds(deps.clock) + deps.uploadTtlSeconds;
  await deps.store.transaction(async (trx: Knex.Transaction) => {
    await deps.store.lockUser(trx, userId);
    await checkQuota(deps, trx, userId, input.bytes, 'bytes');
    await deps.store.insert(trx, {
      id,
      user_id: userId,
      state: 'pending',
      sha256: null,
      mime_type: mimeType,
      bytes: input.bytes,
      width: null,
      height: null,
      filename: cleanFilename(input.filename ?? null),
      upload_key: uploadKey(id),
      merged_into: null,
      created_at: unixSeconds(deps.clock),
      expires_at: expiresAt,
    });
    await deps.store.rememberStaging(trx, uploadKey(id), expiresAt + STAGING_MARGIN_SECONDS);
  });
  const target = await deps.storage.uploadUrl(uploadKey(id), { expiresIn: deps.uploadTtlSeconds, contentType: mimeType, bytes: input.bytes });
  return { id, object: 'media.upload' as const, upload_url: target.url, method: target.method, headers: target.headers, expires_at: expiresAt };
}

/**
 * Completes a direct upload. The transition is recorded with an event in one transaction (so the
 * media-dedup worker finishes the job if this process stops half-way), then finalised here.
 */
export async function completeUpload(deps: MediaDeps, userId: string, id: string): Promise<{ media: MediaObject; deduped: boolean }> {
  if (!isMediaId(id)) throw notFoundMedia(id);
  const now = unixSeconds(deps.clock);
  let row = await deps.store.byId(id);
  if (!row || row.user_id !== userId) throw notFoundMedia(id);
  if (row.state === 'pending') {
    if ((row.expires_at ?? 0) <= now) throw notFoundMedia(id);
    await deps.store.transaction(async (trx: Knex.Transaction) => {
      if (await deps.store.claimPending(trx, id, userId, now)) await recordEvent(trx, MEDIA_UPLOAD_COMPLETED, { media_id: id });
    });
  }
  const stored: StoredMedia | null = await finalizeUpload(deps, id, true);
  if (!stored) throw notFoundMedia(id);
  return { media: await present(deps, stored.row, stored.deduped), deduped: stored.deduped };
}
