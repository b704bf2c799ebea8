import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createRedisRevocations } from '../../services/kit/revocations-redis.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';

const redisPort = Number(new URL(TEST_REDIS_URL).port || 6379);
const channel = () => `revocations_test_${process.pid}_${randomBytes(4).toString('hex')}`;

/** Resolves when `check` holds; pub/sub delivery is asynchronous, so this waits (bounded). */
const until = (check: () => boolean, label: string) => waitFor(check, 2000, label, 10);

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
