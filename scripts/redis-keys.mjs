import { Redis } from 'ioredis';

/**
 * Deletes every Redis key that starts with `prefix` (rate-limit counters and the like) on the Redis
 * at `url`: a test, a bench or the cluster script leaves nothing behind on a shared server. Throws
 * when the server cannot be reached; callers that only tidy up catch it.
 */
export async function deleteRedisKeys(prefix, url) {
  if (!prefix) return;
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}
