import test from 'ava';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { allowPolicyScenario, denyPolicyScenario, type RedisOutage } from '../helpers/redis-outage.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_REDIS_URL } from '../helpers/servers.js';

// The shared Redis behind a fault proxy that cuts every connection and refuses new ones; the
// scenarios (rate-limit fault policy, a revocation published during the outage) are described in
// test/helpers/redis-outage.ts. Redis itself keeps running, so the limiter finds the window's
// count it had before the cut.
const figures = reliabilityFigures('redis-cut');
test.after.always(() => figures.write());

async function cutRedis(): Promise<RedisOutage> {
  const target = new URL(TEST_REDIS_URL);
  const proxy = await startFaultProxy({ host: target.hostname, port: Number(target.port || 6379) });
  return { url: proxy.url('redis'), fail: () => proxy.cut(), restore: () => proxy.resume(), close: () => proxy.close() };
}

test('Redis cut, policy allow: requests pass during the outage, limits count again after, a key revoked during the outage is refused after reconnect', async (t) => {
  await allowPolicyScenario(t, figures.row('Redis cut (rate-limit policy allow, revocation during the outage)'), await cutRedis());
});

test('Redis cut, policy deny: 503 in the error body during the outage, served again when Redis is back', async (t) => {
  await denyPolicyScenario(t, figures.row('Redis cut (rate-limit policy deny)'), await cutRedis());
});
