import { Redis } from 'ioredis';
import { REVOCATION_CHANNEL, type RevocationChannel } from './revocations.js';

interface MinimalLogger {
  warn(fields: Record<string, unknown>, message: string): void;
}

/**
 * Revocations over Redis pub/sub, for many edge nodes (`REDIS_URL`). One publisher connection and
 * one subscriber connection per subscription. Pub/sub is fire-and-forget, so a subscriber that
 * lost its connection may have missed messages: when it is back (ioredis resubscribes by itself)
 * `onResync` is called and the cache must be flushed.
 */
export function createRedisRevocations(url: string, options: { channel?: string; logger?: MinimalLogger } = {}): RevocationChannel {
  const channel = options.channel ?? REVOCATION_CHANNEL;
  const clients = new Set<Redis>();
  const connect = () => {
    const client = new Redis(url, { maxRetriesPerRequest: 2, retryStrategy: (attempt) => Math.min(100 * attempt, 2000) });
    client.on('error', (error) => options.logger?.warn({ err: error.message }, 'revocations: redis error'));
    clients.add(client);
    return client;
  };
  let publisher: Redis | null = null;

  return {
    async publish(message) {
      publisher ??= connect();
      await publisher.publish(channel, message);
    },
    async subscribe(handlers) {
      const subscriber = connect();
      let lost = false;
      subscriber.on('close', () => {
        lost = true;
      });
      subscriber.on('ready', () => {
        if (!lost) return;
        lost = false;
        handlers.onResync();
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
      for (const client of clients) client.disconnect();
      clients.clear();
      publisher = null;
    },
  };
}
