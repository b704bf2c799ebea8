import test from 'ava';
import { offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBytes } from 'node:crypto';
import { createRedisRevocations } from '../../services/kit/revocations-redis.js';
import { revocationChannelFor } from '../../services/kit/revocations.js';
import { spawnEdgeProcess, type EdgeProcess } from '../../bench/edge/spawn.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { deleteRedisKeys } from '../helpers/redis.js';
import { startFakeUpstream, startFakeValidator } from '../plugins/fakes.js';
import { deckVars } from './deck-fixture.js';
import { waitFor } from '../helpers/wait.js';

// Two gateway processes on one Redis: the limits are one counter, and a revocation published
// once reaches both nodes' caches. Both processes get the same clock offset, placing them at
// second 1 of a minute window, so the test never straddles a window boundary.
const TOKEN = 't'.repeat(40);
let nodes: EdgeProcess[] = [];
let validator: Awaited<ReturnType<typeof startFakeValidator>>;
let upstream: Awaited<ReturnType<typeof startFakeUpstream>>;

const redisPrefix = `shared_${process.pid}_${randomBytes(3).toString('hex')}`;

test.before(async () => {
  validator = await startFakeValidator(TOKEN);
  upstream = await startFakeUpstream();
  const offset = offsetToNextMinute();
  const vars = deckVars({
    DECK_LLM_API_URL: upstream.url,
    DECK_RESPONSE_API_URL: upstream.url,
    DECK_MEDIA_API_URL: upstream.url,
    DECK_MCP_TOOLS_URL: upstream.url,
    DECK_GATEWAY_SHARED_SECRET: TOKEN,
    DECK_API_KEY_VALIDATE_URL: validator.url,
    DECK_API_KEY_CACHE_TTL_SECONDS: '3600',
    DECK_RATE_LIMIT_POLICY: 'redis',
    DECK_REDIS_URL: TEST_REDIS_URL,
    DECK_REDIS_PREFIX: redisPrefix,
    DECK_RATE_LIMIT_IP_PER_MINUTE: '6',
    DECK_RATE_LIMIT_FREE_PER_MINUTE: '3',
  });
  const env = { EDGE_PROCESS_VARS: JSON.stringify(vars), EDGE_PROCESS_REDIS_URL: TEST_REDIS_URL, EDGE_PROCESS_CLOCK_OFFSET_MS: String(offset), EDGE_PROCESS_TRUSTED_PROXIES: '127.0.0.1' };
  nodes = await Promise.all([spawnEdgeProcess(env), spawnEdgeProcess(env)]);
});

test.after.always(async () => {
  await Promise.all(nodes.map((n) => n.stop()));
  await validator?.close();
  await upstream?.close();
  await deleteRedisKeys(redisPrefix);
});

const get = (node: EdgeProcess, path: string, headers: Record<string, string>) => fetch(`${node.url}${path}`, { headers });

test.serial('a free key gets 3 requests per minute across both nodes together', async (t) => {
  const key = validator.add('user_shared', 'free');
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++) {
    const res = await get(nodes[i % 2]!, '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': `192.0.2.${i + 1}` });
    statuses.push(res.status);
    if (i === 2) t.is(res.headers.get('x-ratelimit-remaining'), '0');
  }
  t.deepEqual(statuses, [200, 200, 200, 429, 429, 429]);
});

test.serial('the per-IP limit is one counter across both nodes', async (t) => {
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) {
    statuses.push((await get(nodes[i % 2]!, '/.well-known/jwks.json', { 'x-forwarded-for': '192.0.2.200' })).status);
  }
  t.deepEqual(statuses, [200, 200, 200, 200, 200, 200, 429, 429]);
});

test.serial('a revoked key stops working on both nodes (Redis pub/sub purges both caches)', async (t) => {
  const key = validator.add('user_rev', 'pro');
  for (const node of nodes) t.is((await get(node, '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': '192.0.2.50' })).status, 200);
  const callsCached = validator.calls;
  for (const node of nodes) t.is((await get(node, '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': '192.0.2.51' })).status, 200);
  t.is(validator.calls, callsCached, 'both nodes answer from their caches');
  validator.remove(key.key);
  // The channel of this file's prefix: other files' nodes never hear it.
  const publisher = createRedisRevocations(TEST_REDIS_URL, { channel: revocationChannelFor(redisPrefix) });
  await publisher.publish(key.hash);
  await publisher.close();
  // Pub/sub delivery is asynchronous: wait (waitFor's default bound) for each node to have handled
  // the message. Each attempt comes from an address of its own, so the per-IP limit never answers.
  let attempt = 0;
  const nextAddress = () => `198.18.${Math.floor(attempt / 250)}.${(attempt++ % 250) + 1}`;
  for (const [i, node] of nodes.entries()) {
    const status = await waitFor(async () => {
      const res = await get(node, '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': nextAddress() });
      return res.status === 200 ? false : res.status;
    }, undefined, `node ${i + 1} refusing the revoked key`);
    t.is(status, 401);
  }
});
