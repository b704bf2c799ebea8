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
 *   and at most `MAX_HELD` of them, and published once the bus has reconnected, with the next
 *   cancel that goes out, or at the latest by a retry `RETRY_FIRST_MS` after a failed attempt
 *   (doubling to `RETRY_MAX_MS`): a publish can fail with the connection up (a confirm that does
 *   not come while the broker throttles publishers under a memory alarm, a publishing channel the
 *   broker closed), and then no reconnect ever comes. One older than `maxAgeMs` by then is
 *   dropped, its call is over.
 * - receiving: a replica's queue outlives its connection by `maxAgeMs` (the kit's
 *   `transientGraceMs`), so a replica that reconnects sooner is handed what was published meanwhile
 *   (a replica that crashed leaves its queue that long; one that stops cleanly deletes it with its
 *   consumer, `stop`). Chosen over re-announcing cancels on a reconnect: the broker keeps them,
 *   and no replica has to remember the cancels it passed on.
 * Each message carries how long this replica kept it (`age_ms`, from the client's cancel arriving
 * to its publish, 0 when it went out at once), so one kept here never stops a call of the same user
 * that started after the cancel under a reused id (`ToolCaller.cancelHere`). An age, not a time of
 * day: the receiver subtracts it from its own clock and compares with its own calls' start times,
 * so no two replicas' clocks are ever compared (an absolute time did that, and a receiver whose
 * clock ran ahead by more than the allowance ignored even a cancel sent at once). What the age
 * leaves out is the time in transit, which makes the cancel look younger, never older: a call it
 * named is always found. The one gap: a cancel the broker kept for a receiver that was away counts
 * from its delivery, so a call started there meanwhile under the reused id is not told apart.
 */
export const CALL_CANCELLED_EVENT = 'mcp.call.cancelled';
/** The client's reason travels at most this long (it only labels the abort). */
const REASON_MAX = 200;
/** Cancels kept while the bus is away; past it the oldest is dropped (each names one call). */
export const MAX_HELD = 1000;
/** After a failed attempt, kept cancels are tried again this long after, doubling up to `RETRY_MAX_MS`. */
export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 10_000;

/** Runs `run` once after `delayMs` without keeping the process alive; returns what clears it. Tests pass their own. */
export type ArmTimer = (run: () => void, delayMs: number) => () => void;
const unrefTimer: ArmTimer = (run, delayMs) => {
  const timer = setTimeout(run, delayMs);
  timer.unref();
  return () => clearTimeout(timer);
};

interface CancelMessage {
  user_id: string;
  request_id: string | number;
  reason?: string;
  /** The replica that published it (it already looked among its own calls). */
  from: string;
  /**
   * How long that replica kept it before publishing, by its own clock (0: at once). Absent from a
   * replica of an older version (it sent a time of day, `at`, which is not compared across clocks).
   */
  age_ms?: number;
}

export interface CancelRelay {
  /** Asks the other replicas to cancel the call; does not wait (kept while the bus cannot take it). */
  publish(userId: string, requestId: string | number, reason: string | undefined): void;
  /** Starts taking other replicas' cancels, handing each to `cancelHere` with how long it was kept; stops with `stop`. */
  listen(cancelHere: (userId: string, requestId: string | number, reason: string | undefined, heldMs: number | undefined) => boolean): Promise<void>;
  /** Cancels kept until the bus takes them. */
  held(): number;
  stop(): Promise<void>;
}

export function createCancelRelay(deps: { bus: Bus; logger: Logger; clock: Clock; maxAgeMs: number; armTimer?: ArmTimer }): CancelRelay | null {
  if (deps.bus.driver !== 'amqp') return null;
  const armTimer = deps.armTimer ?? unrefTimer;
  const self = randomUUID();
  let consumer: Consumer | undefined;
  let stopped = false;
  /** Oldest first: sent in the order the clients' cancels arrived (`keptAt`, this replica's clock). */
  const held: Array<{ message: CancelMessage; messageId: string; keptAt: number }> = [];
  let flushing: Promise<void> | undefined;
  /** A reconnect (or cancel) came while a pass was running: it may have failed before that, so one more. */
  let again = false;
  /** A publish failed: the next one that goes out says the kept ones are flowing again. */
  let keeping = false;
  /** The retry after a failed pass: one at a time, cleared by a pass that empties `held`. */
  let clearRetry: (() => void) | undefined;
  let retryDelayMs = RETRY_FIRST_MS;

  /** Whether a publish failed (what is left in `held` waits for a reconnect, a cancel or the retry). */
  const pass = async (): Promise<boolean> => {
    let dropped = 0;
    let sent = 0;
    try {
      while (held.length > 0 && !stopped) {
        const next = held[0]!;
        const ageMs = Math.max(0, deps.clock.now() - next.keptAt);
        if (ageMs > deps.maxAgeMs) {
          held.shift();
          dropped++;
          continue;
        }
        try {
          await deps.bus.publish(CALL_CANCELLED_EVENT, { ...next.message, age_ms: ageMs }, { messageId: next.messageId });
        } catch (error) {
          if (!keeping) deps.logger.warn({ err: (error as Error).message, held: held.length }, 'cancels for calls not running here are kept until the broker takes them');
          keeping = true;
          return true;
        }
        if (held[0] === next) held.shift();
        sent++;
      }
      return false;
    } finally {
      if (dropped > 0) deps.logger.warn({ dropped, max_age_ms: deps.maxAgeMs }, 'cancels kept longer than a tool call runs were dropped');
      if (sent > 0 && keeping) {
        keeping = false;
        deps.logger.info({ sent }, 'kept cancels passed to the other replicas');
      }
    }
  };
  const retryLater = () => {
    if (clearRetry) return;
    const delayMs = retryDelayMs;
    retryDelayMs = Math.min(retryDelayMs * 2, RETRY_MAX_MS);
    clearRetry = armTimer(() => {
      clearRetry = undefined;
      if (!stopped) void flush();
    }, delayMs);
  };
  const flush = (): Promise<void> => {
    if (flushing) {
      again = true;
      return flushing;
    }
    again = false;
    flushing = pass().then((failed) => {
      flushing = undefined;
      if (stopped) return;
      if (held.length === 0) {
        clearRetry?.();
        clearRetry = undefined;
        retryDelayMs = RETRY_FIRST_MS;
      } else if (again) void flush();
      else if (failed) retryLater();
    });
    return flushing;
  };
  const removeListener = deps.bus.onReconnect(() => void flush());

  return {
    publish(userId, requestId, reason) {
      const message: CancelMessage = { user_id: userId, request_id: requestId, from: self, ...(reason ? { reason: reason.slice(0, REASON_MAX) } : {}) };
      if (held.length >= MAX_HELD) {
        held.shift();
        deps.logger.warn({ max: MAX_HELD }, 'too many cancels kept while the broker is away; the oldest was dropped');
      }
      held.push({ message, messageId: randomUUID(), keptAt: deps.clock.now() });
      void flush();
    },
    async listen(cancelHere) {
      consumer = await deps.bus.consume<CancelMessage>(
        { queue: `mcp-tools.call-cancels.${self}`, bindings: [CALL_CANCELLED_EVENT], transient: true, transientGraceMs: deps.maxAgeMs, prefetch: 64 },
        async (message, delivery) => {
          const body = message.body;
          const requestId = body?.request_id;
          if (body?.from !== self && typeof body?.user_id === 'string' && (typeof requestId === 'string' || typeof requestId === 'number')) {
            // No age (an older replica's message): taken as sent at once, as before ages were sent.
            const heldMs = typeof body.age_ms === 'number' && Number.isFinite(body.age_ms) ? Math.max(0, body.age_ms) : undefined;
            if (cancelHere(body.user_id, requestId, typeof body.reason === 'string' ? body.reason : undefined, heldMs)) {
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
      clearRetry?.();
      clearRetry = undefined;
      if (held.length > 0) deps.logger.warn({ dropped: held.length }, 'cancels kept while the broker was away are dropped with the process');
      held.length = 0;
      // Deletes this replica's queue too: nothing published from now on waits there for the grace.
      await consumer?.cancel();
    },
  };
}
