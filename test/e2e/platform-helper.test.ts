import test from 'ava';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform } from '../helpers/platform.js';

// test/helpers/platform.ts: two platforms in one process stay independent — stopping one closes
// only its own edge (its validator connections, counters and subscriptions).
test('stopping one platform leaves another one in the same process working', async (t) => {
  const adminKey = `sk_${randomBase62(32)}`;
  const [a, b] = await Promise.all([startTestPlatform(), startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey } })]);
  try {
    t.not(a.url, b.url);
    t.is((await fetch(`${b.url}/v1/conversations`, { headers: { 'x-api-key': adminKey } })).status, 200);
    await a.stop();
    // A route of another service has its own api-key-auth instance: a fresh validation through
    // b's validator connections, which must still be open (not 503), and must pass (not 401).
    const res = await fetch(`${b.url}/v1/responses`, { headers: { authorization: `Bearer ${adminKey}` } });
    const text = await res.text();
    t.false([401, 503].includes(res.status), `status ${res.status} ${text}`);
  } finally {
    await b.stop();
  }
});
