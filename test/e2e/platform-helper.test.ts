import test from 'ava';
import OpenAI, { NotFoundError } from 'openai';
import { randomBase62 } from '../../services/kit/secrets.js';
import { keyClient, startTestPlatform } from '../helpers/platform.js';

// test/helpers/platform.ts: two platforms in one process stay independent — stopping one closes
// only its own edge (its validator connections, counters and subscriptions).
test('stopping one platform leaves another one in the same process working', async (t) => {
  const adminKey = `sk_${randomBase62(32)}`;
  const [a, b] = await Promise.all([startTestPlatform(), startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey } })]);
  try {
    t.not(a.url, b.url);
    t.is((await keyClient(b, adminKey).get('/conversations').withResponse()).response.status, 200);
    await a.stop();
    // A route of another service has its own api-key-auth instance: a fresh validation (the key as
    // a Bearer token this time) through b's validator connections, which must still be open (not
    // 503) and must pass (not 401), so that response-api itself answers: no such response.
    const client = new OpenAI({ baseURL: `${b.url}/v1`, apiKey: adminKey, maxRetries: 0 });
    const error = await t.throwsAsync(client.responses.retrieve('resp_not_there'), { instanceOf: NotFoundError });
    t.is(error?.status, 404);
    t.regex(error?.message ?? '', /resp_not_there/);
  } finally {
    await b.stop();
  }
});
