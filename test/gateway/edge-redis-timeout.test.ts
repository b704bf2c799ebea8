import { randomBytes } from 'node:crypto';
import test from 'ava';
import { Redis } from 'ioredis';
import { loadEdgeConfig } from '../../services/gateway/config.js';
import { deckVariables } from '../../services/gateway/deck-vars.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { systemClock } from '../../services/kit/clock.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startEdgeWithFakes } from './edge-harness.js';
import { deckVars, loadTestDeck } from './deck-fixture.js';

// EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS (DECK_RATE_LIMIT_REDIS_TIMEOUT_MS, the plugin's redis_timeout_ms):
// how long a request waits for its Redis counter before the fault policy decides.
const PREFIX = `redis_timeout_${process.pid}_${randomBytes(3).toString('hex')}`;
const urls = { llmApi: 'http://127.0.0.1:1', responseApi: 'http://127.0.0.1:2', mediaApi: 'http://127.0.0.1:3', mcpTools: 'http://127.0.0.1:4' };

const rateLimitConfigs = (vars: Record<string, string>) => {
  const deck = loadTestDeck(vars);
  const all = [...(deck.plugins ?? []), ...(deck.services ?? []).flatMap((s) => (s.routes ?? []).flatMap((r) => r.plugins ?? []))];
  return all.filter((p) => p.name === 'tiered-rate-limit').map((p) => parseTieredRateLimitConfig(p.config));
};

test.after.always(async () => {
  const redis = new Redis(TEST_REDIS_URL);
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${PREFIX}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length) await redis.del(...keys);
  } while (cursor !== '0');
  redis.disconnect();
});

test('the setting reaches every tiered-rate-limit instance of the deck file; bad values are refused by name', (t) => {
  const edge = (env: Record<string, string>) => deckVariables({ JWT_ISSUER: 'http://x', JWT_AUDIENCE: 'a', REDIS_URL: TEST_REDIS_URL, EDGE_REDIS_PREFIX: 'edge', ...loadEdgeConfig(env) }, urls, 'x'.repeat(40), {});
  t.is(edge({}).DECK_RATE_LIMIT_REDIS_TIMEOUT_MS, '200');
  const vars = edge({ EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS: '750' });
  t.is(vars.DECK_RATE_LIMIT_REDIS_TIMEOUT_MS, '750');
  const configs = rateLimitConfigs({ DECK_RATE_LIMIT_REDIS_TIMEOUT_MS: vars.DECK_RATE_LIMIT_REDIS_TIMEOUT_MS! });
  // The global instance and the guest-login route's.
  t.is(configs.length, 2);
  t.deepEqual(configs.map((c) => c.redis_timeout_ms), [750, 750]);
  t.deepEqual(rateLimitConfigs({}).map((c) => c.redis_timeout_ms), [200, 200]);
  for (const bad of ['0', '-5', 'soon', '60001']) t.throws(() => loadEdgeConfig({ EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS: bad }), { message: /EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS/ });
  t.throws(() => parseTieredRateLimitConfig({ redis_timeout_ms: 0 }), { message: /redis_timeout_ms/ });
});

test('with Redis stalled, an edge on the default timeout refuses (deny) while one with a longer timeout still waits and passes once Redis answers', async (t) => {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(TEST_REDIS_URL).port || 6379) });
  t.teardown(() => proxy.close());
  const clock = systemClock;
  const edgeOn = async (timeoutMs?: string) => {
    const vars: Record<string, string> = {
      DECK_RATE_LIMIT_POLICY: 'redis',
      DECK_REDIS_URL: proxy.url('redis'),
      DECK_REDIS_PREFIX: PREFIX,
      DECK_RATE_LIMIT_FAULT_POLICY: 'deny',
      DECK_RATE_LIMIT_IP_PER_MINUTE: '100000',
    };
    if (timeoutMs) vars.DECK_RATE_LIMIT_REDIS_TIMEOUT_MS = timeoutMs;
    const edge = await startEdgeWithFakes({ clock, vars });
    t.teardown(() => edge.close());
    return edge;
  };
  t.is(deckVars().DECK_RATE_LIMIT_REDIS_TIMEOUT_MS, '200');
  const patient = await edgeOn('60000');
  const hasty = await edgeOn();
  // Both are connected to Redis (the per-address counter passed) before it stalls.
  for (const edge of [patient, hasty]) t.is((await fetch(`${edge.url}/openapi.json`)).status, 200);

  proxy.stall();
  let patientAnswered = false;
  const patientAnswer = fetch(`${patient.url}/openapi.json`).then((r) => {
    patientAnswered = true;
    return r.status;
  });
  const hastyAnswer = await fetch(`${hasty.url}/openapi.json`);
  t.is(hastyAnswer.status, 503, 'the default 200 ms passed: the fault policy refused');
  // Started first, on the same stalled Redis, with 60 s to wait: still waiting.
  t.false(patientAnswered);
  proxy.resume();
  t.is(await patientAnswer, 200);
});
