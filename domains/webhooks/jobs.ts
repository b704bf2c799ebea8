import type { Bus } from '../../services/kit/index.js';
import { ATTEMPT_HEADER, DELIVERY_QUEUE } from './events.js';

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
