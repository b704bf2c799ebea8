import { deleteRedisKeys as deleteKeys } from '../../scripts/redis-keys.mjs';
import { TEST_REDIS_URL } from './servers.js';

/**
 * Deletes every key under `prefix` on the test Redis. The counters a test makes expire within a
 * day anyway, so a failed clean-up fails nothing; it only keeps the shared server tidy.
 */
export async function deleteRedisKeys(prefix: string, url = TEST_REDIS_URL): Promise<void> {
  await deleteKeys(prefix, url).catch(() => {});
}
