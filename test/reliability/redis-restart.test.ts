import test from 'ava';
import { startPrivateRedis } from '../helpers/private-servers.js';
import { allowPolicyScenario, denyPolicyScenario, type RedisOutage } from '../helpers/redis-outage.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

// A real Redis (the test's own, never the shared server: no persistence) is stopped and started
// again on the same port; the scenarios (rate-limit fault policy, a revocation published while
// Redis is down) are described in test/helpers/redis-outage.ts. The restarted Redis is empty, so
// the limiter counts the window from zero again, and the edge's clients reconnect by themselves.
const figures = reliabilityFigures('redis-restart');
test.after.always(() => figures.write());

async function restartedRedis(signal: 'SIGTERM' | 'SIGKILL'): Promise<RedisOutage> {
  const redis = await startPrivateRedis();
  return { url: redis.url, fail: () => redis.stop(signal), restore: () => redis.start(), close: () => redis.dispose() };
}

test('Redis stopped and started again, policy allow: requests pass while it is down, limits count again after, a key revoked meanwhile is refused', async (t) => {
  await allowPolicyScenario(t, figures.row('Redis restarted (rate-limit policy allow, revocation while down)'), await restartedRedis('SIGTERM'));
});

test('Redis killed and started again, policy deny: 503 in the error body while it is down, served again when it is back', async (t) => {
  await denyPolicyScenario(t, figures.row('Redis killed and restarted (rate-limit policy deny)'), await restartedRedis('SIGKILL'));
});
