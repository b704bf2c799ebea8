/** Deletes every Redis key that starts with `prefix` on the Redis at `url` (see redis-keys.mjs). */
export function deleteRedisKeys(prefix: string, url: string): Promise<void>;
