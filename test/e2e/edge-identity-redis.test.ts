import test from 'ava';
import { waitFor } from '../helpers/wait.js';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The platform with REDIS_URL: revocations travel over Redis pub/sub (the runtime's Redis
// driver) and the edge's counters live in Redis (atomic script), as with many edge nodes.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({
    clock: offsetClock(offsetToNextMinute()),
    env: { REDIS_URL: TEST_REDIS_URL, BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_RATE_LIMIT_FREE_PER_MINUTE: '2' },
  });
});
test.after.always(async () => {
  await p?.stop();
});

const call = (path: string, headers: Record<string, string> = {}, method = 'GET') => fetch(`${p.url}${path}`, { method, headers });

async function guestWithKey(tier: string) {
  const login = (await (await call('/llm/auth/guest-login', {}, 'POST')).json()) as { access_token: string; user_id: string };
  const res = await fetch(`${p.url}/v1/admin/api-keys`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: login.user_id, name: 'redis-e2e', tier }),
  });
  const created = (await res.json()) as { id: string; key: string };
  return { ...login, ...created };
}

test.serial('revocation over Redis: the deleted key is refused (cache purged by the pub/sub message)', async (t) => {
  const user = await guestWithKey('pro');
  // One keyed call warms the edge's key cache. The guest's user bucket (free: 2 per minute here)
  // counts every credential, so the deletion below is its second request.
  t.is((await call('/v1/conversations', { 'x-api-key': user.key })).status, 200);
  t.is((await call(`/auth/api-keys/${user.id}`, { authorization: `Bearer ${user.access_token}` }, 'DELETE')).status, 200);
  // Pub/sub is asynchronous even within one process: wait (bounded) for the subscriber.
  const refused = await waitFor(async () => (await call('/v1/conversations', { 'x-api-key': user.key })).status === 401, 1000, 'the revocation', 20);
  t.true(refused);
});

test.serial('free keys limited through Redis counters: 2 per minute, then 429', async (t) => {
  const user = await guestWithKey('free');
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await call('/v1/conversations', { 'x-api-key': user.key })).status);
  t.deepEqual(statuses, [200, 200, 429]);
});
