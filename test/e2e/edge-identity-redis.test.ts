import test from 'ava';
import OpenAI, { AuthenticationError, RateLimitError } from 'openai';
import { waitFor } from '../helpers/wait.js';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';

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

// The official SDK: its generic post/get/delete for the platform routes (guest login, API keys,
// conversations listing).
const withToken = (token: string) => new OpenAI({ baseURL: p.url, apiKey: token, maxRetries: 0 });

async function guestWithKey(tier: string) {
  const anonymous = new OpenAI({ baseURL: p.url, apiKey: 'unused', maxRetries: 0, defaultHeaders: { Authorization: null } });
  const login = (await anonymous.post('/llm/auth/guest-login')) as { access_token: string; user_id: string };
  const created = (await keyClient(p, ADMIN_KEY).post('/admin/api-keys', { body: { user_id: login.user_id, name: 'redis-e2e', tier } })) as { id: string; key: string };
  return { ...login, ...created };
}

/** The status of the request: the SDK's answer, or the status of the error it threw. */
const statusOf = (request: { withResponse(): Promise<{ response: Response }> }) =>
  request.withResponse().then(
    ({ response }) => response.status,
    (error: { status?: number }) => {
      if (typeof error.status !== 'number') throw error;
      return error.status;
    },
  );

test.serial('revocation over Redis: the deleted key is refused (cache purged by the pub/sub message)', async (t) => {
  const user = await guestWithKey('pro');
  const keyed = keyClient(p, user.key);
  // One keyed call warms the edge's key cache. The guest's user bucket (free: 2 per minute here)
  // counts every credential, so the deletion below is its second request.
  t.is(await statusOf(keyed.get('/conversations')), 200);
  t.is(await statusOf(withToken(user.access_token).delete(`/auth/api-keys/${user.id}`)), 200);
  // Pub/sub is asynchronous even within one process: wait (bounded) for the subscriber.
  const refused = await waitFor(() => keyed.get('/conversations').then(() => false, (error) => error instanceof AuthenticationError), undefined, 'the revocation');
  t.true(refused);
});

test.serial('free keys limited through Redis counters: 2 per minute, then 429', async (t) => {
  const user = await guestWithKey('free');
  const keyed = keyClient(p, user.key);
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push(await statusOf(keyed.get('/conversations')));
  t.deepEqual(statuses, [200, 200, 429]);
  await t.throwsAsync(keyed.get('/conversations'), { instanceOf: RateLimitError });
});
