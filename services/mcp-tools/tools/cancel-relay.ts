import { randomUUID } from 'node:crypto';
import type { Bus, Clock, Consumer, Logger } from '../../kit/index.js';

/**
 * A client's `notifications/cancelled` across replicas. The server keeps no session, so the POST
 * carrying the cancel may reach a replica other than the one running the call it names. A cancel
 * that finds no call of its user under that id in this process (`ToolCaller.cancel`) is published
 * on the bus as `mcp.call.cancelled` with the caller's user id (from the edge's identity, never
 * from the message's sender) and the request id; every replica consumes that topic on a queue of
 * its own and cancels a call only when one of the same user's calls runs there under that id, so a
 * user never cancels another's. The local case pays nothing for this: the bus is used only when
 * the call is not here. RabbitMQ only: on the PostgreSQL-backed bus (one process) a cancel stays in
 * its process.
 *
 * A broker outage loses no cancel younger than `maxAgeMs` (about the longest a tool call runs):
 * - publishing: a cancel the bus cannot take now (disconnected, unconfirmed) is kept here, in order
 *   and at most `MAX_HELD` of them, and published once the bus has reconnected (or with the next
 *   cancel that goes out); one older than `maxAgeMs` by then is dropped, its call is over.
 * - receiving: a replica's queue outlives its connection by `maxAgeMs` (the kit's
 *   `transientGraceMs`), so a replica that reconnects sooner is handed what was published meanwhile
 *   (a replica that crashed leaves its queue that long; one that stops cleanly deletes it with its
 *   consumer, `stop`). Chosen over re-announcing cancels on a reconnect: the broker keeps them,
 *   and no replica has to remember the cancels it passed on.
 * Each message carries when the client's cancel arrived (`at`), so one delivered late never stops
 * a call of the same user that started after it under a reused id (`ToolCaller.cancelHere`).
 */
export const CALL_CANCELLED_EVENT = 'mcp.call.cancelled';
/** The client's reason travels at most this long (it only labels the abort). */
const REASON_MAX = 200;
/** Cancels kept while the bus is away; past it the oldest is dropped (each names one call). */
export const MAX_HELD = 1000;

interface CancelMessage {
  user_id: string;
  request_id: string | number;
  reason?: string;
  /** The replica that published it (it already looked among its own calls). */
  from: string;
  /** When the client's cancel reached that replica (its clock, ms since the epoch). */
  at: number;
}

export interface CancelRelay {
  /** Asks the other replicas to cancel the call; does not wait (kept while the bus cannot take it). */
  publish(userId: string, requestId: string | number, reason: string | undefined): void;
  /** Starts taking other replicas' cancels, handing each to `cancelHere`; stops with `stop`. */
  listen(cancelHere: (userId: string, requestId: string | number, reason: string | undefined, issuedAt: number | undefined) => boolean): Promise<void>;
  /** Cancels kept until the bus takes them. */
  held(): number;
  stop(): Promise<void>;
}

export function createCancelRelay(deps: { bus: Bus; logger: Logger; clock: Clock; maxAgeMs: number }): CancelRelay | null {
  if (deps.bus.driver !== 'amqp') return null;
  const self = randomUUID();
  let consumer: Consumer | undefined;
  let stopped = false;
  /** Oldest first: sent in the order the clients' cancels arrived. */
  const held: Array<{ message: CancelMessage; messageId: string }> = [];
  let flushing: Promise<void> | undefined;
  /** A reconnect (or cancel) came while a pass was running: it may have failed before that, so one more. */
  let again = false;
  /** A publish failed: the next one that goes out says the kept ones are flowing again. */
  let keeping = false;

  const pass = async () => {
    let dropped = 0;
    let sent = 0;
    try {
      while (held.length > 0 && !stopped) {
        const next = held[0]!;
        if (deps.clock.now() - next.message.at > deps.maxAgeMs) {
          held.shift();
          dropped++;
          continue;
        }
        try {
          await deps.bus.publish(CALL_CANCELLED_EVENT, next.message, { messageId: next.messageId });
        } catch (error) {
          if (!keeping) deps.logger.warn({ err: (error as Error).message, held: held.length }, 'cancels for calls not running here are kept until the broker takes them');
          keeping = true;
          return;
        }
        if (held[0] === next) held.shift();
        sent++;
      }
    } finally {
      if (dropped > 0) deps.logger.warn({ dropped, max_age_ms: deps.maxAgeMs }, 'cancels kept longer than a tool call runs were dropped');
      if (sent > 0 && keeping) {
        keeping = false;
        deps.logger.info({ sent }, 'kept cancels passed to the other replicas');
      }
    }
  };
  const flush = (): Promise<void> => {
    if (flushing) {
      again = true;
      return flushing;
    }
    again = false;
    flushing = pass().finally(() => {
      flushing = undefined;
      if (again && held.length > 0 && !stopped) void flush();
    });
    return flushing;
  };
  const removeListener = deps.bus.onReconnect(() => void flush());

  return {
    publish(userId, requestId, reason) {
      const message: CancelMessage = { user_id: userId, request_id: requestId, from: self, at: deps.clock.now(), ...(reason ? { reason: reason.slice(0, REASON_MAX) } : {}) };
      if (held.length >= MAX_HELD) {
        held.shift();
        deps.logger.warn({ max: MAX_HELD }, 'too many cancels kept while the broker is away; the oldest was dropped');
      }
      held.push({ message, messageId: randomUUID() });
      void flush();
    },
    async listen(cancelHere) {
      consumer = await deps.bus.consume<CancelMessage>(
        { queue: `mcp-tools.call-cancels.${self}`, bindings: [CALL_CANCELLED_EVENT], transient: true, transientGraceMs: deps.maxAgeMs, prefetch: 64 },
        async (message, delivery) => {
          const body = message.body;
          const requestId = body?.request_id;
          if (body?.from !== self && typeof body?.user_id === 'string' && (typeof requestId === 'string' || typeof requestId === 'number')) {
            const issuedAt = typeof body.at === 'number' && Number.isFinite(body.at) ? body.at : undefined;
            if (cancelHere(body.user_id, requestId, typeof body.reason === 'string' ? body.reason : undefined, issuedAt)) {
              deps.logger.info({ user_id: body.user_id }, 'a call was cancelled by a cancel that reached another replica');
            }
          }
          await delivery.ack();
        },
      );
    },
    held: () => held.length,
    async stop() {
      stopped = true;
      removeListener();
      if (held.length > 0) deps.logger.warn({ dropped: held.length }, 'cancels kept while the broker was away are dropped with the process');
      held.length = 0;
      // Deletes this replica's queue too: nothing published from now on waits there for the grace.
      await consumer?.cancel();
    },
  };
}
