import amqp from 'amqplib';
import test from 'ava';
import { createAmqpBus, MIN_TRANSIENT_GRACE_MS } from '../../services/kit/bus/amqp.js';
import { afterHandlerFailure, createLogger, type Bus } from '../../services/kit/index.js';
import { deleteAmqpTopology, queueConsumers, queueDepth, queuesStartingWith } from '../helpers/amqp.js';
import { TEST_AMQP_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { inbox } from '../helpers/inbox.js';
import { waitFor } from '../helpers/wait.js';

// Broker faults the RabbitMQ driver must survive: a publishing channel the broker closed, a
// connection lost while a publish waits for its confirm, a broker that stops answering while a
// consumer is cancelled. Real RabbitMQ, behind a fault proxy where the test cuts or stalls it.
const name = uniqueName('busamqpfault');
const exchange = `${name}.events`;
const prefix = `${name}.`;
const logger = createLogger({ level: 'silent', name: 'bus-amqp-faults-test' });
let proxy: FaultProxy;
const buses: Bus[] = [];

test.before(async () => {
  proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
});

test.after.always(async () => {
  proxy?.resume();
  for (const bus of buses) await bus.close().catch(() => {});
  await proxy?.close();
  await deleteAmqpTopology(prefix, exchange);
});

async function open(url: string, extra: { publishTimeoutMs?: number } = {}): Promise<Bus> {
  const bus = await createAmqpBus({ url, exchange, queuePrefix: prefix, logger, minBackoffMs: 20, maxBackoffMs: 200, handlerErrorDelayMs: 50, ...extra });
  buses.push(bus);
  return bus;
}

/** Declares `queue` on the shared broker with other arguments than the bus uses, so the bus's own declaration of it is refused (a channel error). */
async function declareConflicting(queue: string): Promise<void> {
  const admin = await amqp.connect(TEST_AMQP_URL);
  try {
    const channel = await admin.createChannel();
    await channel.assertQueue(queue, { durable: true, arguments: { 'x-max-length': 1000 } });
  } finally {
    await admin.close();
  }
}

/** Messages in a queue; 0 when it does not exist (a check of a missing queue closes the channel it was asked on). */
async function depthIfDeclared(queue: string): Promise<number> {
  const admin = await amqp.connect(TEST_AMQP_URL);
  try {
    const channel = await admin.createChannel();
    channel.on('error', () => {});
    return await channel.checkQueue(queue).then((reply) => reply.messageCount, () => 0);
  } finally {
    await admin.close().catch(() => {});
  }
}

test.serial('the readiness ping answers after the broker closed the publishing channel, without waiting for a publish to replace it', async (t) => {
  const bus = await open(TEST_AMQP_URL);
  await bus.ping();
  const queue = `pingconflict_${Date.now()}`;
  await declareConflicting(`${prefix}${queue}`);
  // The broker refuses the declaration and closes the publishing channel; the connection stays up.
  const refused = await t.throwsAsync(bus.send(queue, { n: 1 }, { messageId: 'refused' }));
  t.regex(refused!.message, /PRECONDITION/);
  // Nothing is published next (a quiet service): readiness must not stay down for as long as that lasts.
  await t.notThrowsAsync(bus.ping());
});

test.serial('a publish waiting for its confirm when the connection drops fails as unavailable (a broker fault, not a handler failure)', async (t) => {
  const bus = await open(proxy.url('amqp', 'guest:guest'), { publishTimeoutMs: 60_000 });
  await bus.publish('inflight.before', {}, { messageId: 'inflight-0' });
  proxy.stall();
  t.teardown(() => proxy.resume());
  const pending = bus.publish('inflight.during', {}, { messageId: 'inflight-1' });
  const failed = t.throwsAsync(pending);
  proxy.cut();
  const error = await failed;
  t.is(error!.name, 'BusUnavailableError');
  t.false(afterHandlerFailure({}, error).deadLetter, 'not counted as a handler failure');
  proxy.resume();
  let n = 0;
  await waitFor(() => bus.publish('inflight.after', { n }, { messageId: `inflight-after-${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
});

test.serial('cancelling a consumer while the broker stops answering returns within the broker-answer bound; the consumer is gone once the broker answers again', async (t) => {
  // Heartbeats off: nothing but the bus's own bound ends a wait for the broker (a stalled broker keeps the connection).
  const bus = await open(`${proxy.url('amqp', 'guest:guest')}/?heartbeat=0`, { publishTimeoutMs: 300 });
  const queue = `stalledcancel_${Date.now()}`;
  const box = inbox((r) => r.delivery.ack());
  const consumer = await bus.consume({ queue }, box.handler);
  await bus.send(queue, {}, { messageId: 'stalled-0' });
  t.is((await box.next()).message.id, 'stalled-0');
  proxy.stall();
  t.teardown(() => proxy.resume());
  await consumer.cancel({ drainMs: 100 });
  t.is(box.items.length, 1);
  proxy.resume();
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  await waitFor(async () => (await queueConsumers(admin, `${prefix}${queue}`)) === 0, 10_000, 'the cancelled consumer to leave its queue');
  await bus.send(queue, {}, { messageId: 'stalled-1' });
  t.is(await queueDepth(`${prefix}${queue}`), 1, 'kept in the queue, not handed to the cancelled consumer');
});

test.serial('a retryAfter from a handler whose channel died meanwhile sends no second copy: the broker already offers the message again', async (t) => {
  const bus = await open(proxy.url('amqp', 'guest:guest'));
  const queue = `deadretry_${Date.now()}`;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const retried: Array<Promise<void>> = [];
  const box = inbox(async (r) => {
    if (r.message.redelivered) return r.delivery.ack();
    await gate;
    // A long delay: a copy, if one were sent, would still be waiting in the delay queue at the end.
    const retry = r.delivery.retryAfter(60_000, { copy: 'yes' });
    retried.push(retry);
    await retry;
  });
  await bus.consume({ queue }, box.handler);
  await bus.send(queue, {}, { messageId: 'dead-retry' });
  const first = await box.next();
  t.false(first.message.redelivered);
  proxy.cut();
  proxy.resume();
  let n = 0;
  await waitFor(() => bus.publish('deadretry.ping', { n }, { messageId: `deadretry-${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
  // The consumer is back on a new channel and the broker hands the message out again.
  const again = await box.next();
  t.is(again.message.id, 'dead-retry');
  t.true(again.message.redelivered);
  // Only now does the first handler, on the dead channel, ask for its retry.
  release();
  await Promise.all(retried);
  t.is(await depthIfDeclared(`${prefix}${queue}.delay.60000`), 0, 'no copy was sent');
  t.is(await queueDepth(`${prefix}${queue}`), 0);
});

test.serial('closing the bus while the broker stops answering returns within the broker-answer bound and lets go of the connection', async (t) => {
  // A proxy of its own: its connection count is this bus's alone.
  const own = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  t.teardown(() => own.close());
  const bus = await open(`${own.url('amqp', 'guest:guest')}/?heartbeat=0`, { publishTimeoutMs: 300 });
  await bus.publish('stalledclose.before', {}, { messageId: 'stalled-close-0' });
  t.is(own.connections(), 1);
  own.stall();
  await bus.close();
  await t.throwsAsync(bus.publish('stalledclose.after', {}, { messageId: 'stalled-close-1' }), { name: 'BusUnavailableError' });
  own.resume();
  await waitFor(() => own.connections() === 0, 10_000, 'the closed bus to let go of its connection');
});

test.serial('onReconnect is called once the bus is connected again, its consumers consuming; a removed listener is not', async (t) => {
  // A proxy of its own: cutting it drops this bus's connection only.
  const own = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  t.teardown(() => own.close());
  const bus = await open(own.url('amqp', 'guest:guest'));
  const queue = `reconnectevent_${Date.now()}`;
  const box = inbox((r) => r.delivery.ack());
  await bus.consume({ queue }, box.handler);
  let calls = 0;
  let reconnected!: () => void;
  const once = new Promise<void>((resolve) => (reconnected = resolve));
  const remove = bus.onReconnect(() => {
    calls++;
    reconnected();
  });
  own.cut();
  await waitFor(async () => bus.ping().then(() => false, () => true), 10_000, 'the bus to notice the broker is gone');
  t.is(calls, 0, 'not called for the loss itself');
  own.resume();
  await once;
  t.is(calls, 1);
  // Called with the connection up: a publish made from the listener's turn goes out.
  await bus.send(queue, {}, { messageId: 'after-reconnect' });
  t.is((await box.next()).message.id, 'after-reconnect');

  remove();
  own.cut();
  await waitFor(async () => bus.ping().then(() => false, () => true), 10_000, 'the bus to notice the broker is gone again');
  own.resume();
  await waitFor(async () => bus.ping().then(() => true, () => false), 10_000, 'the second reconnect');
  t.is(calls, 1, 'the removed listener was not called again');
});

test.serial('a transient queue with a grace keeps what is published while its consumer is disconnected, and delivers it after the reconnect', async (t) => {
  const own = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  t.teardown(() => own.close());
  const consumerBus = await open(own.url('amqp', 'guest:guest'));
  const publisher = await open(TEST_AMQP_URL);
  const key = `grace.${Date.now()}`;
  const queue = `gracequeue_${Date.now()}`;
  const box = inbox((r) => r.delivery.ack());
  await consumerBus.consume({ queue, bindings: [key], transient: true, transientGraceMs: 60_000 }, box.handler);
  await publisher.publish(key, { n: 0 }, { messageId: 'grace-before' });
  t.is((await box.next()).message.id, 'grace-before');

  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  own.cut();
  // The broker has seen the connection go (an exclusive queue would be deleted by now).
  await waitFor(async () => (await queueConsumers(admin, `${prefix}${queue}`)) === 0, 10_000, 'the broker to drop the consumer');
  await publisher.publish(key, { n: 1 }, { messageId: 'grace-during' });
  t.is(await depthIfDeclared(`${prefix}${queue}`), 1, 'kept in the queue while its consumer is away');
  own.resume();
  t.is((await box.next()).message.id, 'grace-during');
});

test.serial('a transient queue with a grace is removed by the broker once its consumer has been cut off that long', async (t) => {
  const own = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  t.teardown(() => own.close());
  const bus = await open(own.url('amqp', 'guest:guest'));
  const queue = `graceexpiry_${Date.now()}`;
  await bus.consume({ queue, bindings: ['graceexpiry.x'], transient: true, transientGraceMs: MIN_TRANSIENT_GRACE_MS }, async (_m, d) => d.ack());
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  const exists = async () => {
    const channel = await admin.createChannel();
    channel.on('error', () => {});
    try {
      return await channel.checkQueue(`${prefix}${queue}`).then(() => true, () => false);
    } finally {
      await channel.close().catch(() => {});
    }
  };
  t.true(await exists());
  // Cut off for good (the proxy refuses the reconnects): nothing but the expiry removes the queue.
  own.cut();
  // Checked less often than the grace: a check is a passive declare, which renews the queue's lease.
  await waitFor(async () => !(await exists()), 10_000, 'the broker to expire the queue', MIN_TRANSIENT_GRACE_MS + 500);
  t.false(await exists());
});

test.serial('a grace too short to outlive its own declaration (under half a millisecond: an expiry of 0) is raised: the queue is declared and consumed', async (t) => {
  const bus = await open(TEST_AMQP_URL);
  const stamp = Date.now();
  const queue = `gracetiny_${stamp}`;
  const box = inbox((r) => r.delivery.ack());
  const consumer = await bus.consume({ queue, bindings: [`gracetiny.${stamp}`], transient: true, transientGraceMs: 0.3 }, box.handler);
  t.teardown(() => consumer.cancel());
  await bus.publish(`gracetiny.${stamp}`, {}, { messageId: 'grace-tiny' });
  t.is((await box.next()).message.id, 'grace-tiny');
});

test.serial('a clean stop deletes a transient queue with a grace at once (its consumer cancelled, or its bus closed); a cut connection leaves it for the grace', async (t) => {
  const own = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  t.teardown(() => own.close());
  const cutBus = await open(own.url('amqp', 'guest:guest'));
  const cancelBus = await open(TEST_AMQP_URL);
  const closeBus = await open(TEST_AMQP_URL);
  const stamp = Date.now();
  const queues = { cut: `gracecut_${stamp}`, cancelled: `gracecancelled_${stamp}`, closed: `graceclosed_${stamp}` };
  const options = { bindings: [`gracestop.${stamp}`], transient: true, transientGraceMs: 60_000 };
  const box = inbox((r) => r.delivery.ack());
  await cutBus.consume({ queue: queues.cut, ...options }, box.handler);
  const consumer = await cancelBus.consume({ queue: queues.cancelled, ...options }, box.handler);
  await closeBus.consume({ queue: queues.closed, ...options }, box.handler);
  const onBroker = async () => (await queuesStartingWith(Object.values(queues).map((q) => `${prefix}${q}`))).sort();
  t.deepEqual(await onBroker(), [`${prefix}${queues.cancelled}`, `${prefix}${queues.closed}`, `${prefix}${queues.cut}`]);

  await consumer.cancel();
  await closeBus.close();
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  own.cut();
  await waitFor(async () => (await queueConsumers(admin, `${prefix}${queues.cut}`)) === 0, 10_000, 'the broker to drop the cut consumer');
  t.deepEqual(await onBroker(), [`${prefix}${queues.cut}`], 'only the queue of the consumer cut off is kept');
});
