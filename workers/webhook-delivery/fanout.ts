import { randomBase62, type Bus, type BusMessage, type Clock, type Delivery, type EventMessage, type Logger } from '../../services/kit/index.js';
import type { DeliveriesStore } from '../../services/llm-api/webhooks/deliveries-store.js';
import { ATTEMPT_HEADER, DELIVERY_QUEUE, matchesAny } from '../../services/llm-api/webhooks/events.js';
import type { WebhooksStore } from '../../services/llm-api/webhooks/store.js';

/**
 * The fan-out consumer (queue bound with `#`): one delivery record and one delivery job per active
 * subscription whose patterns match the event. Records are deduplicated on (event_id, webhook_id),
 * so a redelivered event creates nothing twice; a job is sent for every record not marked queued
 * yet, and the event is acked only after that.
 */
export interface FanoutDeps {
  webhooks: WebhooksStore;
  deliveries: DeliveriesStore;
  bus: Bus;
  clock: Clock;
  logger: Logger;
}

export const newDeliveryId = () => `whd_${randomBase62(24)}`;

export function createFanoutHandler(deps: FanoutDeps) {
  return async function fanout(message: BusMessage<EventMessage>, delivery: Delivery): Promise<void> {
    const event = message.body;
    if (!event || typeof event.id !== 'string' || typeof event.type !== 'string') {
      deps.logger.error({ message_id: message.id }, 'not an event message; moved to dead letters');
      return delivery.deadLetter();
    }
    const now = new Date(deps.clock.now());
    const occurred = event.occurred_at ? new Date(event.occurred_at) : now;
    const matching = (await deps.webhooks.active()).filter((w) => matchesAny(w.events, event.type));
    await deps.deliveries.insertMissing(
      matching.map((w) => ({
        id: newDeliveryId(),
        webhook_id: w.id,
        event_id: event.id,
        event_type: event.type,
        event_occurred_at: Number.isNaN(occurred.getTime()) ? now : occurred,
        event_data: event.data ?? {},
      })),
      now,
    );
    const unqueued = await deps.deliveries.unqueued(event.id);
    for (const d of unqueued) {
      await deps.bus.send(DELIVERY_QUEUE, { delivery_id: d.id }, { messageId: d.id, headers: { [ATTEMPT_HEADER]: String(d.attempts) } });
    }
    await deps.deliveries.markQueued(unqueued.map((d) => d.id));
    await delivery.ack();
  };
}
