import { createLocalStore } from './local.js';
import { createRedisStore } from './redis.js';
import type { CounterStore } from './types.js';

export type { CounterStore, CounterWindow, HitResult } from './types.js';
export { createLocalStore, createRedisStore };

/** The counter backend a configuration names: `redis` (shared by every node) or `local`. */
export function createCounterStore(config: { policy: string; redis_url?: string; redis_timeout_ms: number }): CounterStore {
  if (config.policy === 'redis') {
    if (!config.redis_url) throw new Error('tiered-rate-limit: policy "redis" needs redis_url');
    return createRedisStore({ url: config.redis_url, timeoutMs: config.redis_timeout_ms });
  }
  return createLocalStore();
}
