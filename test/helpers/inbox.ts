import type { BusMessage, Delivery } from '../../services/kit/index.js';

/**
 * Collects messages a consumer receives, so a test can await the next one (bounded, failing
 * clearly) instead of sleeping. Handlers decide what to do with each delivery.
 */
export interface Received<T = unknown> {
  message: BusMessage<T>;
  delivery: Delivery;
  at: number;
}

export function inbox<T = unknown>(onMessage?: (r: Received<T>) => Promise<void> | void) {
  const items: Received<T>[] = [];
  const waiters: Array<() => void> = [];
  let cursor = 0;
  const handler = async (message: BusMessage<T>, delivery: Delivery) => {
    const received = { message, delivery, at: Date.now() };
    items.push(received);
    waiters.splice(0).forEach((w) => w());
    await onMessage?.(received);
  };
  async function next(boundMs = 15_000): Promise<Received<T>> {
    const deadline = Date.now() + boundMs;
    while (cursor >= items.length) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`no message arrived within ${boundMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, remaining);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return items[cursor++]!;
  }
  /** Resolves once `predicate(all items)` holds (bounded). */
  async function until(predicate: (all: Received<T>[]) => boolean, boundMs = 30_000): Promise<Received<T>[]> {
    const deadline = Date.now() + boundMs;
    while (!predicate(items)) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`condition not reached within ${boundMs} ms (have ${items.length} messages)`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, remaining);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return items;
  }
  return { handler, next, until, items };
}
