import { afterHandlerFailure, ApiError, HANDLER_FAILURES_HEADER, type BusMessage, type Delivery, type EventMessage, type Logger } from '../../services/kit/index.js';
import { GC_RETRY_MARGIN_MS, MEDIA_DELETED, MEDIA_OBJECT_UNREFERENCED, MEDIA_UPLOAD_COMPLETED, collectObject, failureOf, finalizeUpload, isStoreServerFault, sweep, type IngestDeps } from '../../domains/media/index.js';

/**
 * The media-dedup worker's two jobs, as plain functions over the media domain (so tests drive them
 * with injected failures):
 * - `handle`: events from the outbox. `media.upload.completed` finalises a completed direct upload
 *   (a no-op when the request that completed it already did); `media.deleted` and
 *   `media.object.unreferenced` (an upload refused after writing its object) collect the object
 *   when no media references it any more.
 * - `sweep`: expires reservations never completed (their staging objects go first), finishes
 *   finalisations that stopped half-way, and collects objects no record references.
 * Every step is idempotent; a failure is retried after RETRY_MS, as the bus retries a handler that
 * throws: an event failing MAX_HANDLER_FAILURES times in a row (a poison event) goes to the queue's
 * dead letters, logged once; a failure because the database, the bus or the object store is
 * unavailable (the store answering 5xx or SlowDown: `isStoreServerFault`, the classifier
 * media-api answers 503 with) is retried for as long as the outage lasts, not counted. What a
 * dead-lettered event left undone, the sweep finishes.
 */
export const RETRY_MS = 5000;

export interface MediaDedupDeps extends IngestDeps {
  graceSeconds: number;
  logger: Logger;
}

/**
 * Added to the grace period before a deleted media's object is tried again, so the retry finds the
 * grace over. The sum is a bus delay: MEDIA_GC_GRACE_SECONDS is bounded so that it stays within
 * what RabbitMQ accepts (`MAX_GC_GRACE_SECONDS`).
 */
const GRACE_MARGIN_MS = GC_RETRY_MARGIN_MS;

export function createMediaDedup(deps: MediaDedupDeps) {
  /** An object the collector declined that nothing references yet: only its grace period kept it. */
  async function stillToCollect(sha256: string): Promise<boolean> {
    if (deps.graceSeconds <= 0 || !(await deps.store.objectExists(sha256))) return false;
    return (await deps.store.transaction((trx) => deps.store.referenceCount(trx, sha256))) === 0;
  }

  async function handle(message: BusMessage<EventMessage>, delivery: Delivery): Promise<void> {
    const event = message.body;
    const data = (event?.data ?? {}) as Record<string, unknown>;
    try {
      if (event?.type === MEDIA_UPLOAD_COMPLETED && typeof data.media_id === 'string') {
        await finalizeUpload(deps, data.media_id);
      } else if ((event?.type === MEDIA_DELETED || event?.type === MEDIA_OBJECT_UNREFERENCED) && typeof data.sha256 === 'string') {
        if (!(await collectObject(deps, data.sha256, deps.graceSeconds)) && (await stillToCollect(data.sha256))) {
          // Unreferenced but touched within the grace period (a media deleted soon after its
          // upload): the event comes back once the grace has passed, rather than leaving the object
          // to a sweep that may be off (MEDIA_SWEEP_INTERVAL_MS=0: only on events).
          deps.logger.debug({ sha256: data.sha256 }, 'object within its grace period; collecting it later');
          await delivery.retryAfter(deps.graceSeconds * 1000 + GRACE_MARGIN_MS);
          return;
        }
      }
      await delivery.ack();
    } catch (error) {
      if (error instanceof ApiError && error.status < 500) {
        // A refused upload (not an image, over quota…): finalisation already removed what it had to.
        deps.logger.info({ event: event?.type, err: error.message }, 'media event settled with a client error');
        await delivery.ack();
        return;
      }
      if (isStoreServerFault(error)) {
        // The object store failing (5xx, SlowDown) is an outage, not a broken event: retried for as
        // long as it lasts and not counted toward dead-lettering (the count so far is carried on).
        const before = message.headers[HANDLER_FAILURES_HEADER];
        deps.logger.warn({ event: event?.type, err: failureOf(error) }, `object store unavailable; media event retried in ${RETRY_MS} ms`);
        await delivery.retryAfter(RETRY_MS, before ? { [HANDLER_FAILURES_HEADER]: before } : undefined);
        return;
      }
      const { failures, deadLetter } = afterHandlerFailure(message.headers, error);
      if (deadLetter) {
        deps.logger.error({ event: event?.type, message_id: message.id, failures, err: (error as Error)?.message }, 'media event keeps failing; moved to dead letters');
        await delivery.deadLetter();
        return;
      }
      deps.logger.warn({ event: event?.type, failures, err: (error as Error)?.message }, `media event failed; retrying in ${RETRY_MS} ms`);
      await delivery.retryAfter(RETRY_MS, { [HANDLER_FAILURES_HEADER]: String(failures) });
    }
  }

  return { handle, sweep: () => sweep(deps, deps.graceSeconds) };
}
