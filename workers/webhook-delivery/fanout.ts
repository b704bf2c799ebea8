import { newId, type Bus, type BusMessage, type Clock, type Delivery, type EventMessage, type Logger } from '../../services/kit/index.js';
import { matchesAny, sendDeliveryJob, type DeliveriesStore, type WebhooksStore } from '../../domains/webhooks/index.js';

/**
 * The fan-out consumer (queue bound with `#`): one delivery record and one delivery job per active
 * subscription whose patterns match the event and which existed when the event occurred (a
 * pipeline that lags never hands old events to a subscription created since). Records are
 * deduplicated on (event_id, webhook_id), so a redelivered event creates nothing twice; a job is
 * sent for every record not marked queued yet, and the event is acked only after that.
 */
export interface FanoutDeps {
  webhooks: WebhooksStore;
  deliveries: DeliveriesStore;
  bus: Bus;
  clock: Clock;
  logger: Logger;
}

export function createFanoutHandler(deps: FanoutDeps) {
  return async function fanout(message: BusMessage<EventMessage>, delivery: Delivery): Promise<void> {
    const event = message.body;
    if (!event || typeof event.id !== 'string' || typeof event.type !== 'string') {
      deps.logger.error({ message_id: message.id }, 'not an event message; moved to dead letters');
      return delivery.deadLetter();
    }
    const now = new Date(deps.clock.now());
    const occurred = typeof event.occurred_at === 'string' ? new Date(event.occurred_at) : new Date(Number.NaN);
    if (Number.isNaN(occurred.getTime())) {
      // Without the time it occurred, the subscriptions that may receive it are unknown: deny.
      deps.logger.error({ message_id: message.id, event_type: event.type }, 'event without a valid occurred_at; moved to dead letters');
      return delivery.deadLetter();
    }
    const matching = (await deps.webhooks.activeAt(event.occurred_at)).filter((w) => matchesAny(w.events, event.type));
    await deps.deliveries.insertMissing(
      matching.map((w) => ({
        id: newId('webhookDelivery'),
        webhook_id: w.id,
        event_id: event.id,
        event_type: event.type,
        event_occurred_at: occurred,
        event_data: event.data ?? {},
      })),
      now,
    );
    const unqueued = await deps.deliveries.unqueued(event.id);
    for (const d of unqueued) {
      await sendDeliveryJob(deps.bus, d);
    }
    await deps.deliveries.markQueued(unqueued.map((d) => d.id));
    await delivery.ack();
  };
}
