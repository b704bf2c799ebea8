import { ApiError, type BusMessage, type Delivery, type EventMessage, type Logger } from '../../services/kit/index.js';
import { MEDIA_DELETED, MEDIA_UPLOAD_COMPLETED, collectObject, finalizeUpload, sweep, type IngestDeps } from '../../domains/media/index.js';

/**
 * The media-dedup worker's two jobs, as plain functions over the media domain (so tests drive them
 * with injected failures):
 * - `handle`: events from the outbox. `media.upload.completed` finalises a completed direct upload
 *   (a no-op when the request that completed it already did); `media.deleted` collects the object
 *   when no media references it any more.
 * - `sweep`: expires reservations never completed (their staging objects go first), finishes
 *   finalisations that stopped half-way, and collects objects no record references.
 * Every step is idempotent; a failure is retried (the bus redelivers after RETRY_MS).
 */
export const RETRY_MS = 5000;

export interface MediaDedupDeps extends IngestDeps {
  graceSeconds: number;
  logger: Logger;
}

export function createMediaDedup(deps: MediaDedupDeps) {
  async function handle(message: BusMessage<EventMessage>, delivery: Delivery): Promise<void> {
    const event = message.body;
    const data = (event?.data ?? {}) as Record<string, unknown>;
    try {
      if (event?.type === MEDIA_UPLOAD_COMPLETED && typeof data.media_id === 'string') {
        await finalizeUpload(deps, data.media_id);
      } else if (event?.type === MEDIA_DELETED && typeof data.sha256 === 'string') {
        await collectObject(deps, data.sha256, deps.graceSeconds);
      }
      await delivery.ack();
    } catch (error) {
      if (error instanceof ApiError && error.status < 500) {
        // A refused upload (not an image, over quota…): finalisation already removed what it had to.
        deps.logger.info({ event: event?.type, err: error.message }, 'media event settled with a client error');
        await delivery.ack();
        return;
      }
      deps.logger.warn({ event: event?.type, err: (error as Error).message }, `media event failed; retrying in ${RETRY_MS} ms`);
      await delivery.retryAfter(RETRY_MS);
    }
  }

  return { handle, sweep: () => sweep(deps, deps.graceSeconds) };
}
