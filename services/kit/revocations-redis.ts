import type { Redis } from 'ioredis';
import { REVOCATION_CHANNEL, type RevocationChannel } from './revocations.js';

interface MinimalLogger {
  warn(fields: Record<string, unknown>, message: string): void;
}

/**
 * Revocations over Redis pub/sub, for many edge nodes (`REDIS_URL`). One publisher connection and
 * one subscriber connection per subscription. Pub/sub is fire-and-forget, so a subscriber that
 * lost its connection may have missed messages: when it is back (ioredis resubscribes by itself)
 * `onResync` is called and the cache must be flushed. ioredis is loaded on first use, so importing
 * this module (part of kit/core, which the plugins import) costs nothing.
 */
export function createRedisRevocations(url: string, options: { channel?: string; logger?: MinimalLogger } = {}): RevocationChannel {
  const channel = options.channel ?? REVOCATION_CHANNEL;
  const clients = new Set<Redis>();
  let closed = false;
  const connect = async () => {
    const { Redis } = await import('ioredis');
    if (closed) throw new Error('revocations: channel closed');
    // autoResubscribe off: ioredis's own resubscription is a promise nobody can catch, which
    // becomes an unhandled rejection when the connection closes before it completes. The
    // subscriber resubscribes itself on 'ready' instead.
    const client = new Redis(url, { maxRetriesPerRequest: 2, retryStrategy: (attempt) => Math.min(100 * attempt, 2000), autoResubscribe: false });
    client.on('error', (error) => options.logger?.warn({ err: error.message }, 'revocations: redis error'));
    clients.add(client);
    return client;
  };
  let publisher: Promise<Redis> | null = null;

  return {
    async publish(message) {
      publisher ??= connect();
      await (await publisher).publish(channel, message);
    },
    async subscribe(handlers) {
      const subscriber = await connect();
      let lost = false;
      subscriber.on('close', () => {
        lost = true;
      });
      subscriber.on('ready', () => {
        if (!lost) return;
        lost = false;
        // Flush after the subscription is back, so no revocation falls between the two.
        subscriber.subscribe(channel).then(
          () => handlers.onResync(),
          (error: Error) => {
            lost = true; // the next reconnect tries again
            options.logger?.warn({ err: error.message }, 'revocations: resubscribe failed');
          },
        );
      });
      subscriber.on('message', (from: string, message: string) => {
        if (from === channel) handlers.onRevoked(message);
      });
      await subscriber.subscribe(channel);
      return async () => {
        clients.delete(subscriber);
        subscriber.disconnect();
      };
    },
    async close() {
      closed = true;
      for (const client of clients) client.disconnect();
      clients.clear();
      publisher = null;
    },
  };
}
