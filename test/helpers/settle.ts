import type { BusMessage, Delivery } from '../../services/kit/index.js';

/**
 * Feeds a message to a consumer's handler as the bus would: each `retryAfter` hands the message
 * back with the headers the retry carried, until the handler acks or dead-letters it (or `max`
 * rounds). Returns what each round did: `ack`, `retry` or `dead`.
 */
export async function untilSettled<T>(handle: (message: BusMessage<T>, delivery: Delivery) => Promise<void>, first: BusMessage<T>, max: number): Promise<string[]> {
  const outcomes: string[] = [];
  let message = first;
  for (let round = 0; round < max; round++) {
    let next: Record<string, string> | undefined;
    const delivery: Delivery = {
      ack: async () => void outcomes.push('ack'),
      retryAfter: async (_delayMs, headers) => {
        outcomes.push('retry');
        next = { ...message.headers, ...headers };
      },
      deadLetter: async () => void outcomes.push('dead'),
    };
    await handle(message, delivery);
    if (!next) break;
    message = { ...message, headers: next };
  }
  return outcomes;
}
