import { createBatchWriter, type Clock, type Logger } from '../../kit/index.js';
import type { StreamEvent } from './recorder.js';
import type { ResponseEventRow, ResponseStore } from './store.js';

/** The events that end a response's stream: nothing follows them. */
export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(['response.completed', 'response.failed', 'response.incomplete', 'response.cancelled']);

/** How often the events of background responses are written, at most: a stream that follows them from the database is this much behind at worst. */
export const EVENTS_FLUSH_MS = 100;
/** How long a response's events are kept after its terminal event (its end), for a client that streams it again: the next purge pass after that drops them. */
export const EVENTS_KEPT_MS = 3_600_000;

/**
 * Keeps the events of background responses in the database, so that a client can stream one again
 * (`GET /v1/responses/{id}?stream=true`) from any process while it runs and after it ended. Events
 * are queued in memory and written in batches (every `flushMs`, and at once after a terminal event
 * unless writes are failing, so a follower sees the end without waiting): a step's text deltas cost one statement per batch,
 * not one each. One writer serves every response of the process and writes one batch at a time,
 * so a response's events are stored in order and a follower never sees a later one before an earlier.
 */
export function createResponseEventLog(options: { store: ResponseStore; clock: Clock; logger: Logger; flushMs?: number }) {
  const writer = createBatchWriter<ResponseEventRow>({
    name: 'response events',
    write: (batch) => options.store.appendEvents(batch),
    flushMs: options.flushMs ?? EVENTS_FLUSH_MS,
    batchSize: 500,
    maxQueued: 200_000,
    logger: options.logger,
  });
  return {
    /**
     * The `onEvent` that keeps the events of one response. An event whose `sequence_number` is not
     * above the last one kept is not kept (it would break a replay's order): the recorder never
     * sends one, so it is logged as the bug it is.
     */
    recorder(responseId: string): (event: StreamEvent) => void {
      let last = -1;
      return (event) => {
        if (!(event.sequence_number > last)) {
          options.logger.error({ response_id: responseId, sequence_number: event.sequence_number, last }, 'a response event out of sequence is not kept');
          return;
        }
        last = event.sequence_number;
        writer.push({ response_id: responseId, sequence_number: event.sequence_number, type: event.type, data: JSON.stringify(event), created_at: new Date(options.clock.now()) });
        // At once rather than at the tick (a follower waits on it), except while writes fail: the tick retries then.
        if (TERMINAL_EVENTS.has(event.type)) writer.requestFlush();
      };
    },
    flush: () => writer.flush(),
    pending: () => writer.pending(),
    /** Writes what is queued (after the loops of a stopping process wrote their terminal events). */
    stop: () => writer.stop(),
  };
}

export type ResponseEventLog = ReturnType<typeof createResponseEventLog>;
