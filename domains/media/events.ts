import type { Bus } from '../../services/kit/index.js';

/**
 * Events of the media domain (through the kit's outbox; routing key = type) and the worker's queue.
 * - `media.upload.completed` `{media_id}`: a client called complete on a direct upload; the
 *   worker finalises it if the request that recorded it did not get that far.
 * - `media.deleted` `{media_id, sha256}`: the worker collects the object if nothing references it.
 * - `media.object.unreferenced` `{sha256}`: an upload wrote (or touched) the object and then did
 *   not record a media for it (refused over quota, the store failing after the object's row was
 *   added); the worker collects it like a deleted media's, once its grace period has passed.
 */
export const MEDIA_UPLOAD_COMPLETED = 'media.upload.completed';
export const MEDIA_DELETED = 'media.deleted';
export const MEDIA_OBJECT_UNREFERENCED = 'media.object.unreferenced';
export const MEDIA_DEDUP_QUEUE = 'media.dedup';
export const MEDIA_DEDUP_BINDINGS = [MEDIA_UPLOAD_COMPLETED, MEDIA_DELETED, MEDIA_OBJECT_UNREFERENCED];

/**
 * Declares the worker's queue and bindings (idempotent), so events recorded before the worker's
 * first start wait for it: a topic exchange drops what no queue is bound to.
 */
export async function declareMediaDedupQueue(bus: Bus): Promise<void> {
  await bus.declare({ queue: MEDIA_DEDUP_QUEUE, bindings: MEDIA_DEDUP_BINDINGS });
}
