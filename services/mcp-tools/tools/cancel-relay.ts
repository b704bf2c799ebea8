import { randomUUID } from 'node:crypto';
import type { Bus, Consumer, Logger } from '../../kit/index.js';

/**
 * A client's `notifications/cancelled` across replicas. The server keeps no session, so the POST
 * carrying the cancel may reach a replica other than the one running the call it names. A cancel
 * that finds no call of its user under that id in this process (`ToolCaller.cancel`) is published
 * on the bus as `mcp.call.cancelled` with the caller's user id (from the edge's identity, never
 * from the message's sender) and the request id; every replica consumes that topic on a queue of
 * its own (transient: the broker deletes it with the replica's connection) and cancels a call only
 * when one of the same user's calls runs there under that id, so a user never cancels another's.
 * The local case pays nothing for this: the bus is used only when the call is not here.
 * RabbitMQ only: on the PostgreSQL-backed bus (one process) a cancel stays in its process.
 */
export const CALL_CANCELLED_EVENT = 'mcp.call.cancelled';
/** The client's reason travels at most this long (it only labels the abort). */
const REASON_MAX = 200;

interface CancelMessage {
  user_id: string;
  request_id: string | number;
  reason?: string;
  /** The replica that published it (it already looked among its own calls). */
  from: string;
}

export interface CancelRelay {
  /** Asks the other replicas to cancel the call; does not wait (a failure to publish is logged). */
  publish(userId: string, requestId: string | number, reason: string | undefined): void;
  /** Starts taking other replicas' cancels, handing each to `cancelHere`; stops with `stop`. */
  listen(cancelHere: (userId: string, requestId: string | number, reason: string | undefined) => boolean): Promise<void>;
  stop(): Promise<void>;
}

export function createCancelRelay(deps: { bus: Bus; logger: Logger }): CancelRelay | null {
  if (deps.bus.driver !== 'amqp') return null;
  const self = randomUUID();
  let consumer: Consumer | undefined;
  return {
    publish(userId, requestId, reason) {
      const message: CancelMessage = { user_id: userId, request_id: requestId, from: self, ...(reason ? { reason: reason.slice(0, REASON_MAX) } : {}) };
      deps.bus.publish(CALL_CANCELLED_EVENT, message, { messageId: randomUUID() }).catch((error: Error) => {
        deps.logger.warn({ err: error.message, user_id: userId }, 'a cancel for a call not running here could not be passed to the other replicas');
      });
    },
    async listen(cancelHere) {
      consumer = await deps.bus.consume<CancelMessage>(
        { queue: `mcp-tools.call-cancels.${self}`, bindings: [CALL_CANCELLED_EVENT], transient: true, prefetch: 64 },
        async (message, delivery) => {
          const body = message.body;
          const requestId = body?.request_id;
          if (body?.from !== self && typeof body?.user_id === 'string' && (typeof requestId === 'string' || typeof requestId === 'number')) {
            if (cancelHere(body.user_id, requestId, typeof body.reason === 'string' ? body.reason : undefined)) {
              deps.logger.info({ user_id: body.user_id }, 'a call was cancelled by a cancel that reached another replica');
            }
          }
          await delivery.ack();
        },
      );
    },
    async stop() {
      await consumer?.cancel();
    },
  };
}
