import { ApiError, unixSeconds } from '../../services/kit/core/index.js';
import type { Clock } from '../../services/kit/core/index.js';
import type { Logger } from '../../services/kit/core/index.js';
import { recordEvent } from '../../services/kit/data/index.js';
import { MEDIA_OBJECT_UNREFERENCED } from './events.js';
import { DecodeQueueFull, MediaRejection, sanitizeImage, type SanitizedImage, type SanitizeLimits } from './processing/sanitize.js';
import type { MediaRow, MediaStore } from './store.js';
import { failureOf } from './storage/faults.js';
import { objectKey, ObjectTooLargeError, type ObjectStorage } from './storage/types.js';
import { newMediaId } from './ids.js';

/**
 * The storage pipeline shared by media-api (uploads, complete) and the media-dedup worker
 * (finalising completed uploads, collecting objects, expiring reservations). Every step is
 * idempotent and ordered so that a crash between any two steps leaves no object without a record
 * for longer than the collector's grace period, and a retry never creates a second record:
 * touch the object row → write the object → one transaction (dedup check, quota, record) →
 * remove the staging object.
 *
 * When the user already holds the same bytes, the object is not written again. That copy may be
 * deleted, and its object collected, before the recording transaction; so that transaction holds
 * the object's row (`holdObject`, the collector then waits and sees the new reference) and, when
 * the row is gone, the object is written again and the transaction retried. A delete takes the
 * user's lock too (`deleteReady`), so that transaction's dedup check never answers, or merges a
 * completed upload into, a copy whose delete is under way: it waits for the delete, then records
 * a media of its own.
 *
 * Quota: a cheap check before anything is written (a refused upload writes nothing), and the
 * authoritative one in the recording transaction. When that transaction refuses (a concurrent
 * upload took the space meanwhile), or the store fails after the object's row was added, the
 * object may be left without a record: a `media.object.unreferenced` event hands it to the
 * media-dedup worker, which collects it once its grace period has passed (no sweep needed).
 */
export interface IngestDeps {
  store: MediaStore;
  storage: ObjectStorage;
  clock: Clock;
  limits: SanitizeLimits;
  quotaBytes: number;
  /** Bounds concurrent decodes (memory); past `maxWaiting` uploads waiting, DecodeQueueFull. */
  withSlot<T>(work: () => Promise<T>, maxWaiting?: number): Promise<T>;
  /** Uploads a request may wait behind for a decode slot (MEDIA_PROCESSING_QUEUE). */
  maxDecodeWaiting?: number;
  /** Tests inject failures between steps here (crash simulation); production passes nothing. */
  checkpoint?: (step: string) => void | Promise<void>;
  logger?: Logger;
}

export interface StoredMedia {
  row: MediaRow;
  deduped: boolean;
}


/** 400 naming `param` for a refused image; other errors pass through. */
export function rejectionError(error: unknown, param: string): unknown {
  if (error instanceof MediaRejection) return new ApiError(400, error.message, { param });
  if (error instanceof ObjectTooLargeError) return new ApiError(400, `The image exceeds the size limit of ${error.maxBytes} bytes`, { param });
  return error;
}

/**
 * Sanitises under a decode slot. `request`: a client waits for the answer, so the wait is bounded
 * (503 past MEDIA_PROCESSING_QUEUE); a completion the worker finishes waits its turn.
 */
export async function sanitize(deps: Pick<IngestDeps, 'limits' | 'withSlot' | 'maxDecodeWaiting'>, bytes: Buffer, request = false): Promise<SanitizedImage> {
  try {
    return await deps.withSlot(() => sanitizeImage(bytes, deps.limits), request ? (deps.maxDecodeWaiting ?? Infinity) : Infinity);
  } catch (error) {
    if (error instanceof DecodeQueueFull) {
      throw new ApiError(503, 'Too many images are being processed right now; retry in a moment', { code: 'service_unavailable', headers: { 'retry-after': '1' } });
    }
    throw error;
  }
}

/** The 413 of an image (or a reservation) that would take its user over quota. */
export class QuotaExceededError extends ApiError {
  constructor(quota: number, used: number, adding: number, param: string, advice: string) {
    super(413, `Storing this image (${adding} bytes) would exceed your media quota of ${quota} bytes (${used} bytes in use); ${advice}`, { param });
  }
}

const FREE_SPACE = 'delete media to free space';
/** A completion over quota ends its reservation (see finalizeUpload): the client must upload again. */
const UPLOAD_DISCARDED = 'the upload was discarded: delete media to free space, then upload it again';

/** What a quota check names: the request field that carried the bytes, the reservation to leave out, the advice. */
interface QuotaAsk {
  param: string;
  excludeId?: string;
  advice: string;
}

/**
 * The 413 for `adding` bytes taking the user over quota, or null. Authoritative under the user's
 * lock (`trx` holding it); with the plain connection, the cheap check made before writing.
 */
async function quotaRefusal(
  deps: Pick<IngestDeps, 'store' | 'quotaBytes' | 'clock'>,
  db: Parameters<MediaStore['usedBytes']>[0],
  userId: string,
  adding: number,
  ask: QuotaAsk,
): Promise<QuotaExceededError | null> {
  if (deps.quotaBytes <= 0) return null;
  const used = await deps.store.usedBytes(db, userId, unixSeconds(deps.clock), ask.excludeId);
  return used + adding > deps.quotaBytes ? new QuotaExceededError(deps.quotaBytes, used, adding, ask.param, ask.advice) : null;
}

/**
 * Throws 413 when `adding` bytes would take the user over quota (call under the user's lock),
 * naming `param`: the request field that carried the bytes or declared their size.
 */
export async function checkQuota(
  deps: Pick<IngestDeps, 'store' | 'quotaBytes' | 'clock'>,
  trx: Parameters<MediaStore['usedBytes']>[0],
  userId: string,
  adding: number,
  param: string,
  excludeId?: string,
) {
  const refusal = await quotaRefusal(deps, trx, userId, adding, { param, excludeId, advice: FREE_SPACE });
  if (refusal) throw refusal;
}

/**
 * Writes the content-addressed object. The object row is touched first (so the collector leaves
 * it alone), then the bytes are written. They are written even when the object already exists
 * for another user: skipping the write would make another user's upload measurably faster, a
 * timing oracle for "somebody already has these bytes".
 */
async function writeObject(deps: IngestDeps, image: SanitizedImage): Promise<void> {
  await deps.store.touchObject(image.sha256, image.data.length, image.mimeType, new Date(deps.clock.now()));
  await deps.checkpoint?.('object-touched');
  await deps.storage.put(objectKey(image.sha256), image.data, image.mimeType);
  await deps.checkpoint?.('object-written');
}

/** How many times a recording transaction is retried after the object it needed was collected. */
const OBJECT_RETRIES = 3;

class ObjectCollectedError extends Error {
  constructor(sha256: string) {
    super(`the stored object ${sha256} kept being collected while a media was recorded for it`);
  }
}

/**
 * Hands an object this call touched, and may have left without a record, to the media-dedup
 * worker (`media.object.unreferenced`): it collects the object once its grace period has passed,
 * unless a media references it by then, so no sweep is needed. If even recording that fails (the
 * database away), the sweep is what is left: logged.
 */
async function collectLater(deps: IngestDeps, sha256: string): Promise<void> {
  try {
    await deps.store.transaction((trx) => recordEvent(trx, MEDIA_OBJECT_UNREFERENCED, { sha256 }));
  } catch (error) {
    deps.logger?.warn({ sha256, err: failureOf(error) }, 'recording an unreferenced object for collection failed; the sweep collects it');
  }
}

/**
 * Writes the object unless the user already holds these bytes, then runs `record`; when `record`
 * finds the object's row gone (null: collected since the check), writes it and runs it again.
 * Before writing, a cheap quota check (not under the user's lock; `record`'s stays authoritative)
 * refuses an image that cannot fit, so a refused upload writes nothing. When the write or `record`
 * fails after this call touched the object (the store failing, `record` refusing over quota), the
 * object goes to the collector (`collectLater`).
 */
async function withObject<T>(deps: IngestDeps, userId: string, image: SanitizedImage, quota: QuotaAsk, record: () => Promise<T | null>): Promise<T> {
  let write = !(await deps.store.transaction((trx) => deps.store.readyBySha(trx, userId, image.sha256)));
  if (write) {
    const refusal = await quotaRefusal(deps, undefined, userId, image.data.length, quota);
    if (refusal) throw refusal;
  }
  let touched = false;
  try {
    for (let attempt = 0; attempt < OBJECT_RETRIES; attempt++) {
      if (write) {
        touched = true;
        await writeObject(deps, image);
      }
      const result = await record();
      if (result !== null) return result;
      write = true;
    }
  } catch (error) {
    if (touched) await collectLater(deps, image.sha256);
    throw error;
  }
  if (touched) await collectLater(deps, image.sha256);
  throw new ObjectCollectedError(image.sha256);
}

/**
 * Stores a sanitised image as a new media of `userId`, or answers the user's existing one (dedup).
 * `param` is the request field that carried the image (a refusal over quota names it).
 */
export async function storeImage(deps: IngestDeps, userId: string, image: SanitizedImage, filename: string | null, param = 'file'): Promise<StoredMedia> {
  return withObject(deps, userId, image, { param, advice: FREE_SPACE }, () => deps.store.transaction(async (trx): Promise<StoredMedia | null> => {
    await deps.store.lockUser(trx, userId);
    const existing = await deps.store.readyBySha(trx, userId, image.sha256);
    if (existing) return { row: existing, deduped: true };
    if (!(await deps.store.holdObject(trx, image.sha256))) return null;
    await checkQuota(deps, trx, userId, image.data.length, param);
    const row: MediaRow = {
      id: newMediaId(deps.clock),
      user_id: userId,
      state: 'ready',
      sha256: image.sha256,
      mime_type: image.mimeType,
      bytes: image.data.length,
      width: image.width,
      height: image.height,
      filename,
      upload_key: null,
      merged_into: null,
      created_at: unixSeconds(deps.clock),
      expires_at: null,
    };
    await deps.store.insert(trx, row);
    return { row, deduped: false };
  }));
}

export class UploadNotReceivedError extends ApiError {
  constructor(id: string) {
    super(400, `Nothing was uploaded for ${id} yet: PUT the file to the upload URL, then call complete`, { param: 'id' });
  }
}

/**
 * Finalises a completed direct upload (state `completing`): read the staging object, validate and
 * sanitise it, write the content-addressed object, then in one transaction either make the
 * reservation the user's new media or, when the user already has these bytes, mark it merged into
 * that media; finally remove the staging object. Safe to run again after a crash at any step, and
 * by several processes at once (the transaction re-checks the state under the user's lock).
 */
export async function finalizeUpload(deps: IngestDeps, id: string, request = false): Promise<StoredMedia | null> {
  const row = await deps.store.byId(id);
  if (!row) return null;
  if (row.state === 'ready' || row.state === 'merged') return settle(deps, row);
  if (row.state !== 'completing') return null;
  let data: Buffer | null;
  try {
    data = await deps.storage.read(row.upload_key!, deps.limits.maxBytes);
  } catch (error) {
    if (error instanceof ObjectTooLargeError) return discardUpload(deps, row, rejectionError(error, 'id'));
    throw error;
  }
  if (!data) {
    // Completed before anything arrived: back to pending, so the client can still upload.
    await deps.store.revertCompleting(id);
    throw new UploadNotReceivedError(id);
  }
  await deps.checkpoint?.('staging-read');
  let image: SanitizedImage;
  try {
    // A client's complete waits for a decode slot as an upload does (bounded, 503); the row stays
    // `completing`, and the worker (the completion event) or a retried complete finishes it.
    image = await sanitize(deps, data, request);
  } catch (error) {
    if (error instanceof MediaRejection) return discardUpload(deps, row, rejectionError(error, 'id'));
    throw error;
  }
  const quota: QuotaAsk = { param: 'id', excludeId: id, advice: UPLOAD_DISCARDED };
  // `into`: the media a duplicate was merged into, as the transaction saw it under the user's lock.
  // The answer is built from it: a delete of that media committed just after (it waits for the
  // lock) must not turn the completion it came after into a 404.
  let outcome: { settled: MediaRow | null; into?: MediaRow };
  try {
    outcome = await withObject(deps, row.user_id, image, quota, () => deps.store.transaction(async (trx): Promise<{ settled: MediaRow | null; into?: MediaRow } | null> => {
      await deps.store.lockUser(trx, row.user_id);
      const current = await deps.store.byId(id, trx);
      if (!current || current.state !== 'completing') return { settled: current };
      const existing = await deps.store.readyBySha(trx, row.user_id, image.sha256);
      if (existing) {
        await deps.store.markMerged(trx, id, existing.id, unixSeconds(deps.clock) + 86400);
        return { settled: await deps.store.byId(id, trx), into: existing };
      }
      if (!(await deps.store.holdObject(trx, image.sha256))) return null;
      const refused = await quotaRefusal(deps, trx, row.user_id, image.data.length, quota);
      if (refused) throw refused;
      await deps.store.makeReady(trx, id, { sha256: image.sha256, mime_type: image.mimeType, bytes: image.data.length, width: image.width, height: image.height });
      return { settled: await deps.store.byId(id, trx) };
    }));
  } catch (error) {
    // Over quota, before writing or in the transaction (which then wrote nothing): the upload ends.
    if (error instanceof QuotaExceededError) return discardUpload(deps, row, error);
    throw error;
  }
  await deps.checkpoint?.('committed');
  if (!outcome.settled) return null;
  return settle(deps, outcome.settled, outcome.into);
}

/**
 * A completed upload refused for good (not an image, too large, over quota) ends its reservation,
 * like a cancel: the staging object goes, then the row, unless a concurrent finalisation made it
 * ready meanwhile (see `deleteRefused`). Left `completing`, the sweep would retry it at every pass.
 * Throws `refusal`, also when the clean-up fails: that is logged, the row stays `completing`, and
 * the next sweep refuses it again and retries the clean-up.
 */
async function discardUpload(deps: IngestDeps, row: MediaRow, refusal: unknown): Promise<never> {
  try {
    await deps.storage.delete(row.upload_key!);
    await deps.store.deleteRefused(row.id);
  } catch (error) {
    deps.logger?.warn({ media_id: row.id, err: failureOf(error) }, 'removing a refused upload failed; the sweep retries it');
  }
  throw refusal;
}

/**
 * Last step of a finalisation (also its replay): the staging object goes, the answer is built.
 * `into`: the merge target as the finalising transaction saw it; a replay reads it again.
 */
async function settle(deps: IngestDeps, row: MediaRow, into?: MediaRow): Promise<StoredMedia | null> {
  if (row.upload_key) {
    await deps.storage.delete(row.upload_key);
    await deps.store.clearUploadKey(row.id);
  }
  if (row.state === 'ready') return { row: { ...row, upload_key: null }, deduped: false };
  if (row.state === 'merged' && row.merged_into) {
    const target = into ?? (await deps.store.byId(row.merged_into));
    return target && target.state === 'ready' ? { row: target, deduped: true } : null;
  }
  return null;
}

/** Removes an object nobody references (and nobody touched within the grace period). */
export async function collectObject(deps: Pick<IngestDeps, 'store' | 'storage' | 'clock' | 'checkpoint'>, sha256: string, graceSeconds: number): Promise<boolean> {
  const cutoff = new Date(deps.clock.now() - graceSeconds * 1000);
  return deps.store.collectObject(sha256, cutoff, async () => {
    await deps.storage.delete(objectKey(sha256));
    await deps.checkpoint?.('object-deleted');
  });
}

/**
 * Runs one item's step of the housekeeping: a failure (a staging object whose delete keeps
 * failing, a database error) is counted and logged with the ids in `what` and the error's name and
 * message (never the error object); the pass goes on with the next item, and the item is found
 * again by the next pass.
 */
async function eachItem(deps: Pick<IngestDeps, 'logger'>, failures: { count: number }, what: Record<string, string>, message: string, step: () => Promise<void>): Promise<boolean> {
  try {
    await step();
    return true;
  } catch (error) {
    failures.count++;
    deps.logger?.warn({ ...what, err: failureOf(error) }, `${message}; retried next sweep`);
    return false;
  }
}

type SweepDeps = Pick<IngestDeps, 'store' | 'storage' | 'clock' | 'checkpoint' | 'logger'>;

async function expireCounted(deps: SweepDeps, limit: number, failures: { count: number }): Promise<number> {
  const now = unixSeconds(deps.clock);
  const rows = await deps.store.expiredReservations(now, limit);
  let expired = 0;
  for (const row of rows) {
    const what = { media_id: row.id };
    if (row.upload_key && !(await eachItem(deps, failures, what, 'removing an expired upload\'s staging object failed', () => deps.storage.delete(row.upload_key!)))) continue;
    // Outside eachItem: the checkpoint simulates the process stopping here, which ends the pass.
    await deps.checkpoint?.('staging-expired');
    const done = await eachItem(deps, failures, what, 'expiring a reservation failed', async () => {
      await deps.store.deleteExpired(row.id, now);
      // A direct upload that took the reservation's lock just before it expired may have written
      // after the delete above (the row delete waited for it): once the row is gone, delete again.
      if (row.upload_key && !(await deps.store.byId(row.id))) await deps.storage.delete(row.upload_key);
    });
    if (done) expired++;
  }
  return expired;
}

/**
 * Expires open reservations (their staging objects first, then the rows) and merged leftovers;
 * returns how many were expired. One that fails is logged and left for the next call; the rest
 * are expired all the same.
 */
export async function expireReservations(deps: SweepDeps, limit = 500): Promise<number> {
  return expireCounted(deps, limit, { count: 0 });
}

export interface SweepResult {
  expired: number;
  finalized: number;
  collected: number;
  /** Items whose step failed (logged one by one); each is tried again by the next sweep. */
  failed: number;
  /** Temporary files of writes a crash cut short, removed (filesystem driver). */
  temporaries: number;
}

/**
 * One pass of housekeeping: expire reservations, finish finalisations that stopped half-way,
 * remove leftover staging objects, collect unreferenced objects, and delete the staging keys of
 * upload URLs that expired (`media_staging`) once more. A failing item never stops the pass.
 */
export async function sweep(deps: IngestDeps, graceSeconds: number): Promise<SweepResult> {
  const failures = { count: 0 };
  const expired = await expireCounted(deps, 500, failures);
  let finalized = 0;
  for (const row of await deps.store.stuckCompleting(unixSeconds(deps.clock), 100)) {
    try {
      if (await finalizeUpload(deps, row.id)) finalized++;
    } catch (error) {
      // A refusal (a client error) has ended the reservation, or put it back to pending: settled.
      if (!(error instanceof ApiError && error.status < 500)) failures.count++;
      deps.logger?.warn({ media_id: row.id, err: failureOf(error) }, 'finalising a completed upload failed');
    }
  }
  for (const row of await deps.store.readyWithUploadKey(100)) {
    await eachItem(deps, failures, { media_id: row.id }, 'removing a finalised upload\'s staging object failed', async () => void (await settle(deps, row)));
  }
  let collected = 0;
  for (const sha of await deps.store.unreferencedObjects(new Date(deps.clock.now() - graceSeconds * 1000), 500)) {
    await eachItem(deps, failures, { sha256: sha }, 'collecting an unreferenced object failed', async () => {
      if (await collectObject(deps, sha, graceSeconds)) collected++;
    });
  }
  // Upload URLs that have expired can write no more: whatever they wrote after the reservation
  // ended (completed, refused, cancelled, deleted with its owner) goes now.
  for (const key of await deps.store.dueStaging(unixSeconds(deps.clock), 500)) {
    await eachItem(deps, failures, { upload_key: key }, 'removing the staging object of an expired upload URL failed', async () => {
      await deps.storage.delete(key);
      await deps.store.forgetStaging(key);
    });
  }
  let temporaries = 0;
  try {
    temporaries = (await deps.storage.removeStaleTemporaries?.()) ?? 0;
    if (temporaries > 0) deps.logger?.info({ temporaries }, 'media sweep: removed temporary files left by interrupted writes');
  } catch (error) {
    failures.count++;
    deps.logger?.warn({ err: failureOf(error) }, 'removing stale temporary files failed');
  }
  if (failures.count > 0) deps.logger?.warn({ expired, finalized, collected, failed: failures.count }, 'media sweep: some items failed; they are retried next sweep');
  return { expired, finalized, collected, failed: failures.count, temporaries };
}
