import amqp from 'amqplib';
import test from 'ava';
import { createAmqpBus } from '../../services/kit/bus/amqp.js';
import { createLogger, ManualClock, type Bus } from '../../services/kit/index.js';
import { createCancelRelay, MAX_HELD, type CancelRelay } from '../../services/mcp-tools/tools/cancel-relay.js';
import { deleteAmqpTopology, queueConsumers, queuesStartingWith } from '../helpers/amqp.js';
import { TEST_AMQP_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';

// The cancel relay while the publishing replica's connection to RabbitMQ is down (a TCP fault proxy
// cuts it): what it cannot publish is kept, in order, and published once the bus reconnects; what
// is older than the bound by then is dropped, and at most MAX_HELD are kept. Real RabbitMQ; the
// publisher's clock is a manual one, so ageing needs no waiting. A relay that stops deletes its own
// queue at once; one cut off keeps it for the grace.
const name = uniqueName('cancelrelay');
const exchange = `${name}.events`;
const prefix = `${name}.`;
const logger = createLogger({ level: 'silent', name: 'cancel-relay-test' });
const MAX_AGE_MS = 65_000;
const buses: Bus[] = [];
const relays: CancelRelay[] = [];
let proxy: UrlFaultProxy;

test.before(async () => {
  proxy = await startFaultProxyFor(TEST_AMQP_URL, 5672);
});
test.after.always(async () => {
  proxy?.resume();
  for (const relay of relays) await relay.stop().catch(() => {});
  for (const bus of buses) await bus.close().catch(() => {});
  await proxy?.close();
  await deleteAmqpTopology(prefix, exchange);
});

async function bus(url: string): Promise<Bus> {
  const opened = await createAmqpBus({ url, exchange, queuePrefix: prefix, logger, minBackoffMs: 20, maxBackoffMs: 200 });
  buses.push(opened);
  return opened;
}

/** A publishing replica behind the proxy, and a receiving one connected directly that records what it is handed. */
async function replicas() {
  const clock = new ManualClock();
  const publisherBus = await bus(proxy.proxiedUrl);
  const publisher = createCancelRelay({ bus: publisherBus, logger, clock, maxAgeMs: MAX_AGE_MS })!;
  const receiver = createCancelRelay({ bus: await bus(TEST_AMQP_URL), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
  relays.push(publisher, receiver);
  const received: Array<{ userId: string; requestId: string | number; issuedAt: number | undefined }> = [];
  await receiver.listen((userId, requestId, _reason, issuedAt) => {
    received.push({ userId, requestId, issuedAt });
    return false;
  });
  let reconnected!: () => void;
  const back = new Promise<void>((resolve) => (reconnected = resolve));
  publisherBus.onReconnect(() => reconnected());
  return { clock, publisherBus, publisher, received, back };
}

async function cut(bus: Bus): Promise<void> {
  proxy.cut();
  await waitFor(async () => bus.ping().then(() => false, () => true), 10_000, 'the bus to notice the broker is gone');
}

test.serial('a cancel published while the broker is away is kept and published after the reconnect; one older than the bound by then is dropped', async (t) => {
  const { clock, publisherBus, publisher, received, back } = await replicas();
  await cut(publisherBus);
  const first = clock.now();
  publisher.publish('usr_a', 1, 'too old by the time the broker is back');
  clock.advance(MAX_AGE_MS - 1000);
  const second = clock.now();
  publisher.publish('usr_a', 2, undefined);
  t.is(publisher.held(), 2);
  clock.advance(2000);
  t.true(clock.now() - first > MAX_AGE_MS && clock.now() - second <= MAX_AGE_MS);

  proxy.resume();
  await back;
  await waitFor(() => received.length > 0, 10_000, 'the kept cancel to reach the other replica');
  // Sent oldest first on one channel: had the expired one gone out, it would have arrived before this one.
  t.deepEqual(received, [{ userId: 'usr_a', requestId: 2, issuedAt: second }]);
  t.is(publisher.held(), 0);

  // With the bus up, a cancel goes out at once, after nothing.
  publisher.publish('usr_a', 3, undefined);
  await waitFor(() => received.length > 1, 10_000, 'the next cancel');
  t.deepEqual(received.map((r) => r.requestId), [2, 3]);
});

test.serial('at most MAX_HELD cancels are kept while the broker is away: the oldest give way', async (t) => {
  const { publisherBus, publisher, received, back } = await replicas();
  await cut(publisherBus);
  for (let n = 1; n <= MAX_HELD + 2; n++) publisher.publish('usr_b', n, undefined);
  t.is(publisher.held(), MAX_HELD);
  proxy.resume();
  await back;
  await waitFor(() => received.length >= MAX_HELD, 20_000, 'the kept cancels to reach the other replica');
  t.is(received.length, MAX_HELD);
  t.is(received[0]!.requestId, 3);
  t.is(received.at(-1)!.requestId, MAX_HELD + 2);
});

test.serial('a stopped relay deletes its queue of cancels at once; one cut off from the broker keeps it for the grace', async (t) => {
  const queuePrefix = `${prefix}mcp-tools.call-cancels.`;
  const before = new Set(await queuesStartingWith([queuePrefix]));
  const listening = async (url: string) => {
    const relay = createCancelRelay({ bus: await bus(url), logger, clock: new ManualClock(), maxAgeMs: MAX_AGE_MS })!;
    relays.push(relay);
    await relay.listen(() => false);
    const added = (await queuesStartingWith([queuePrefix])).filter((q) => !before.has(q));
    for (const q of added) before.add(q);
    t.is(added.length, 1, 'each listening relay has a queue of its own');
    return { relay, queue: added[0]! };
  };
  const stopping = await listening(TEST_AMQP_URL);
  const cutOff = await listening(proxy.proxiedUrl);

  await stopping.relay.stop();
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  proxy.cut();
  t.teardown(() => proxy.resume());
  await waitFor(async () => (await queueConsumers(admin, cutOff.queue)) === 0, 10_000, 'the broker to drop the cut-off consumer');
  const left = await queuesStartingWith([queuePrefix]);
  t.false(left.includes(stopping.queue), 'the stopped relay left no queue behind');
  t.true(left.includes(cutOff.queue), 'the cut-off relay keeps its queue for the grace');
});
