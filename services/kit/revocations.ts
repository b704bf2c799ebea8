import { EventEmitter } from 'node:events';

/**
 * Credential revocations, published by llm-api (API key deleted or expired, user disabled) and
 * consumed by every edge node to purge its validation cache at once. A message is the SHA-256
 * hex of the revoked API key, or `user:<user_id>` when every key of a user is revoked.
 * Drivers: in-process (one process, `npm start`) and Redis pub/sub (`REDIS_URL`, many edge nodes;
 * implemented with the edge). A subscriber that lost its connection is told through
 * `onResync` and must flush its whole cache, since it may have missed messages.
 */
export const REVOCATION_CHANNEL = 'platform:revocations';

/** The default Redis prefix of a deployment (EDGE_REDIS_PREFIX; the plugins' `redis_prefix`). */
export const DEFAULT_REDIS_PREFIX = 'edge';

/**
 * The Redis revocation channel of a deployment, named by its Redis prefix: llm-api (publisher), the
 * services and the embedded edge take the prefix from EDGE_REDIS_PREFIX, Kong's api-key-auth from
 * its `redis_prefix` (DECK_REDIS_PREFIX in deck/kong.yaml). Deployments (and test files) sharing
 * one Redis under different prefixes then never hear each other's revocations. The default prefix
 * keeps the channel it always had, `platform:revocations`.
 */
export function revocationChannelFor(redisPrefix: string): string {
  return redisPrefix === DEFAULT_REDIS_PREFIX ? REVOCATION_CHANNEL : `${redisPrefix}:revocations`;
}

export interface RevocationChannel {
  publish(message: string): Promise<void>;
  subscribe(handlers: { onRevoked(message: string): void; onResync(): void }): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export const USER_REVOCATION_PREFIX = 'user:';
export const userRevocation = (userId: string) => `${USER_REVOCATION_PREFIX}${userId}`;

/** One process: publish and subscribe through an EventEmitter. */
export function createInProcessRevocations(): RevocationChannel {
  const emitter = new EventEmitter();
  emitter.setMaxListeners(0);
  return {
    async publish(message) {
      emitter.emit('revoked', message);
    },
    async subscribe(handlers) {
      const listener = (message: string) => handlers.onRevoked(message);
      emitter.on('revoked', listener);
      return async () => void emitter.off('revoked', listener);
    },
    async close() {
      emitter.removeAllListeners();
    },
  };
}
