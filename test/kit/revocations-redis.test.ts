import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createRedisRevocations } from '../../services/kit/revocations-redis.js';
import { REVOCATION_CHANNEL, revocationChannelFor } from '../../services/kit/revocations.js';
import { openProcessRuntime } from '../../services/kit/runtime.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { TEST_REDIS_URL, testConfig, uniqueName } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';

const redisPort = Number(new URL(TEST_REDIS_URL).port || 6379);
const channel = () => `revocations_test_${process.pid}_${randomBytes(4).toString('hex')}`;

/** Resolves when `check` holds; pub/sub delivery is asynchronous, so this waits (waitFor's default bound). */
const until = (check: () => boolean, label: string) => waitFor(check, undefined, label, 10);

test('messages published on one node reach every subscriber', async (t) => {
  const name = channel();
  const a = createRedisRevocations(TEST_REDIS_URL, { channel: name });
  const b = createRedisRevocations(TEST_REDIS_URL, { channel: name });
  const got: string[][] = [[], []];
  await a.subscribe({ onRevoked: (m) => got[0]!.push(m), onResync: () => {} });
  await b.subscribe({ onRevoked: (m) => got[1]!.push(m), onResync: () => {} });
  await a.publish('abc123');
  await b.publish('user:user_1');
  await until(() => got[0]!.length === 2 && got[1]!.length === 2, 'delivery');
  t.deepEqual(got, [['abc123', 'user:user_1'], ['abc123', 'user:user_1']]);
  await a.close();
  await b.close();
});

test('a subscriber that lost its connection is told to resync when it is back, and receives again', async (t) => {
  const name = channel();
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: redisPort });
  const subscriber = createRedisRevocations(proxy.url('redis'), { channel: name });
  const publisher = createRedisRevocations(TEST_REDIS_URL, { channel: name });
  const received: string[] = [];
  let resyncs = 0;
  await subscriber.subscribe({ onRevoked: (m) => received.push(m), onResync: () => resyncs++ });
  proxy.cut();
  await publisher.publish('missed-while-down');
  proxy.resume();
  await until(() => resyncs === 1, 'resync');
  await until(() => {
    void publisher.publish('after-reconnect');
    return received.includes('after-reconnect');
  }, 'delivery after reconnect');
  t.false(received.includes('missed-while-down'));
  t.is(resyncs, 1);
  await subscriber.close();
  await publisher.close();
  await proxy.close();
});

test('the channel is named by the Redis prefix: the default prefix keeps platform:revocations', (t) => {
  t.is(revocationChannelFor(loadBaseConfig({}).EDGE_REDIS_PREFIX), REVOCATION_CHANNEL);
  t.is(REVOCATION_CHANNEL, 'platform:revocations');
  t.is(revocationChannelFor('tenant_a'), 'tenant_a:revocations');
  // Each test file's runtime gets a prefix of its own, hence a channel of its own.
  t.not(testConfig().EDGE_REDIS_PREFIX, testConfig().EDGE_REDIS_PREFIX);
});

test('runtimes under two Redis prefixes never hear each other; under the same prefix they do', async (t) => {
  const runtime = (prefix: string) => openProcessRuntime(loadBaseConfig({ LOG_LEVEL: 'silent', REDIS_URL: TEST_REDIS_URL, EDGE_REDIS_PREFIX: prefix }), { name: 'test' });
  const [prefixA, prefixB] = [uniqueName('rv_a'), uniqueName('rv_b')];
  const publisherA = runtime(prefixA);
  const listenerA = runtime(prefixA);
  const listenerB = runtime(prefixB);
  t.teardown(() => Promise.all([publisherA, listenerA, listenerB].map((r) => r.close())));
  const heard = { a: [] as string[], b: [] as string[] };
  await listenerA.revocations.subscribe({ onRevoked: (m) => heard.a.push(m), onResync: () => {} });
  await listenerB.revocations.subscribe({ onRevoked: (m) => heard.b.push(m), onResync: () => {} });
  // Redis delivers to each subscriber in the order it handled the publishes, and each publish is
  // awaited: once a listener has the marker published after the other channel's message, that
  // message would already have reached it, had it been on its channel. No waiting for silence.
  await publisherA.revocations.publish('revoked-under-a');
  await listenerB.revocations.publish('marker-under-b');
  await publisherA.revocations.publish('marker-under-a');
  await until(() => heard.a.includes('marker-under-a') && heard.b.includes('marker-under-b'), 'the markers');
  t.deepEqual(heard, { a: ['revoked-under-a', 'marker-under-a'], b: ['marker-under-b'] });
});
