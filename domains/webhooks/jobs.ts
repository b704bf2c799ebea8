import type { Bus } from '../../services/kit/index.js';
import { ATTEMPT_HEADER, DELIVERY_QUEUE, FANOUT_QUEUE } from './events.js';

/** A delivery job: one attempt to make of one delivery (the worker's delivery queue). */
export interface DeliveryJob {
  delivery_id: string;
}

/**
 * Hands a delivery's next attempt to the delivery queue. The job carries the number of attempts
 * recorded so far; the worker claims the attempt with a compare-and-set on it, so duplicate jobs
 * (fan-out redelivered, sweep, redeliver) never make the same attempt twice.
 */
export function sendDeliveryJob(bus: Bus, delivery: { id: string; attempts: number }): Promise<void> {
  const job: DeliveryJob = { delivery_id: delivery.id };
  return bus.send(DELIVERY_QUEUE, job, { messageId: delivery.id, headers: { [ATTEMPT_HEADER]: String(delivery.attempts) } });
}

/** What the fan-out queue is bound with: every event published on the exchange. */
export const FANOUT_BINDINGS = ['#'];

/**
 * Makes the delivery worker's queues exist on the bus, durable, the fan-out queue bound to every
 * event, whether or not a worker has ever run: a topic exchange drops what no queue is bound to, so
 * events committed before the worker's first start would otherwise be published into nothing (and
 * marked published). llm-api calls it at start, before it serves the admin API, so the binding
 * exists before any subscription can; the worker declares the same when it consumes.
 */
export async function declareWebhookQueues(bus: Bus): Promise<void> {
  await bus.declare({ queue: DELIVERY_QUEUE });
  await bus.declare({ queue: FANOUT_QUEUE, bindings: FANOUT_BINDINGS });
}
