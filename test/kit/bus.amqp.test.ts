import amqp from 'amqplib';
import test from 'ava';
import { createAmqpBus } from '../../services/kit/bus/amqp.js';
import { createDatabase, createLogger, kitMigrations, migrateAll, type Bus, type Database } from '../../services/kit/index.js';
import { deleteAmqpTopology, queueConsumers, queueDepth } from '../helpers/amqp.js';
import { dropSchema, TEST_AMQP_URL, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { busContract, type BusHarness } from './bus-contract.js';
import { inbox } from '../helpers/inbox.js';
import { waitFor } from '../helpers/wait.js';

// The bus contract against the real RabbitMQ on this machine.
const name = uniqueName('busamqp');
const exchange = `${name}.events`;
const prefix = `${name}.`;
const logger = createLogger({ level: 'silent', name: 'bus-amqp-test' });
let db: Database;
let proxy: FaultProxy;
const buses: Bus[] = [];
let harness: BusHarness;

test.before(async () => {
  db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema: name });
  await migrateAll(db.knex, [kitMigrations]);
  proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  const open = async (url: string) => {
    const bus = await createAmqpBus({ url, exchange, queuePrefix: prefix, logger, minBackoffMs: 20, maxBackoffMs: 200, handlerErrorDelayMs: 50 });
    buses.push(bus);
    return bus;
  };
  harness = {
    openBus: () => open(TEST_AMQP_URL),
    openFaultyBus: () => open(proxy.url('amqp', 'guest:guest')),
    knex: db.knex,
    logger,
    advance: async () => {},
    pollsOf: async () => {},
    brokerDown: () => proxy.cut(),
    brokerUp: () => proxy.resume(),
    realTimeDelays: true,
    deadLetters: (queue) => queueDepth(`${prefix}${queue}.dead`),
  };
});

test.after.always(async () => {
  for (const bus of buses) await bus.close().catch(() => {});
  await proxy?.close();
  await db?.close();
  await dropSchema(name);
  await deleteAmqpTopology(prefix, exchange);
});

busContract(test, () => harness);

test.serial('publish fails fast while disconnected (the outbox keeps the event) and works again after reconnect', async (t) => {
  const bus = await harness.openFaultyBus();
  proxy.cut();
  // The first publish after the cut may race the close notification; publishing must start failing.
  let i = 0;
  const failed = await waitFor(() => bus.publish('x.y', { i }, { messageId: `m${i++}` }).then(() => false, () => true), 30_000, 'publishing to fail while cut');
  t.true(failed);
  proxy.resume();
  let n = 0;
  const ok = await waitFor(() => bus.publish('x.y', { n }, { messageId: `again${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
  t.true(ok);
});

test.serial('a message sent to a queue before any consumer declared it is kept (not dropped by the default exchange)', async (t) => {
  const bus = await harness.openBus();
  const queue = `early_${Date.now()}`;
  await bus.send(queue, { early: true }, { messageId: 'early-1' });
  await bus.send(queue, { early: 'delayed' }, { messageId: 'early-2', delayMs: 50 });
  const got: string[] = [];
  let done!: () => void;
  const both = new Promise<void>((r) => (done = r));
  await bus.consume({ queue }, async (message, delivery) => {
    got.push(message.id);
    await delivery.ack();
    if (got.length === 2) done();
  });
  await both;
  t.deepEqual(got, ['early-1', 'early-2']);
});

test.serial('a send to a queue deleted after this bus declared it is not lost: the broker returns it, the queue is declared again and the send repeated', async (t) => {
  const bus = await harness.openBus();
  const queue = `deleted_${Date.now()}`;
  await bus.send(queue, { n: 1 }, { messageId: 'before-delete' });
  await bus.send(queue, { n: 2 }, { messageId: 'delayed-before-delete', delayMs: 50 });
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  const channel = await admin.createChannel();
  // Both deleted with what they held: the work queue and the delay queue.
  await channel.deleteQueue(`${prefix}${queue}`);
  await channel.deleteQueue(`${prefix}${queue}.delay.50`);
  await bus.send(queue, { n: 3 }, { messageId: 'after-delete' });
  t.is(await queueDepth(`${prefix}${queue}`), 1, 'the send after the delete is in the queue, declared anew');
  // The delay queue this bus still takes for declared.
  await bus.send(queue, { n: 4 }, { messageId: 'delayed-after-delete', delayMs: 50 });
  const box = inbox((r) => r.delivery.ack());
  const consumer = await bus.consume({ queue }, box.handler);
  t.teardown(() => consumer.cancel());
  t.deepEqual([(await box.next()).message.id, (await box.next()).message.id].sort(), ['after-delete', 'delayed-after-delete']);
});

test.serial('declare: a broker that lost a declared queue gets it back, bound, when the bus reconnects', async (t) => {
  const bus = await harness.openFaultyBus();
  const queue = `redeclared_${Date.now()}`;
  await bus.declare({ queue, bindings: ['model.*'] });
  // The broker forgets the queue (a new node, a reset) while the bus is connected, then the connection drops.
  const admin = await amqp.connect(TEST_AMQP_URL);
  const channel = await admin.createChannel();
  await channel.deleteQueue(`${prefix}${queue}`);
  await admin.close();
  proxy.cut();
  let i = 0;
  await waitFor(() => bus.publish('x.y', { i }, { messageId: `cut${i++}` }).then(() => false, () => true), 30_000, 'publishing to fail while cut');
  proxy.resume();
  let n = 0;
  await waitFor(() => bus.publish('x.y', { n }, { messageId: `back${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
  // Published after the reconnect and before any consumer exists: kept only if the queue and binding are back.
  await bus.publish('model.added', { kept: true }, { messageId: 'kept-1' });
  const reader = await harness.openBus();
  const box = inbox((r) => r.delivery.ack());
  const consumer = await reader.consume({ queue }, box.handler);
  t.is((await box.next()).message.id, 'kept-1');
  await consumer.cancel();
});

/** Declares `name` on the shared broker with other arguments than the bus uses, so the bus's own declaration of it is refused (a channel error). */
async function declareConflicting(name: string): Promise<void> {
  const admin = await amqp.connect(TEST_AMQP_URL);
  try {
    const channel = await admin.createChannel();
    await channel.assertQueue(name, { durable: true, arguments: { 'x-max-length': 1000 } });
  } finally {
    await admin.close();
  }
}

test.serial('a channel error on the publishing channel (a refused declaration) does not break later publishes, sends or the readiness ping', async (t) => {
  const bus = await harness.openBus();
  const queue = `conflict_${Date.now()}`;
  await declareConflicting(`${prefix}${queue}`);
  // The broker refuses the declaration and closes the channel it came on (the connection stays up).
  const refused = await t.throwsAsync(bus.send(queue, { n: 1 }, { messageId: 'refused-1' }));
  t.regex(refused!.message, /PRECONDITION/);
  const box = inbox((r) => r.delivery.ack());
  const consumer = await bus.consume({ queue: `after_${queue}`, bindings: ['after.*'] }, box.handler);
  await bus.publish('after.error', { ok: true }, { messageId: 'after-1' });
  await bus.send(`after_${queue}`, { ok: true }, { messageId: 'after-2' });
  await bus.ping();
  t.deepEqual([(await box.next()).message.id, (await box.next()).message.id], ['after-1', 'after-2']);
  await consumer.cancel();
});

test.serial('a consumer the broker cancels (its queue deleted) consumes again: the queue is declared anew, bound, and its messages handled', async (t) => {
  const bus = await harness.openBus();
  const queue = `cancelled_${Date.now()}`;
  const box = inbox((r) => r.delivery.ack());
  const consumer = await bus.consume({ queue, bindings: ['gone.*'] }, box.handler);
  await bus.publish('gone.before', {}, { messageId: 'before' });
  t.is((await box.next()).message.id, 'before');
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  const channel = await admin.createChannel();
  await channel.deleteQueue(`${prefix}${queue}`);
  // The consumer comes back by itself on a new channel, with its queue and binding.
  await waitFor(async () => (await queueConsumers(admin, `${prefix}${queue}`)) === 1, 10_000, 'the consumer to be back on its queue');
  await bus.publish('gone.after', {}, { messageId: 'after' });
  t.is((await box.next()).message.id, 'after');
  await consumer.cancel();
});

test.serial('a retry whose send the broker refuses does not keep the message unacked forever: it is offered again and the consumer goes on', async (t) => {
  const bus = await harness.openBus();
  const queue = `stuck_${Date.now()}`;
  // The delay queue of a 70 ms retry cannot be declared: every retryAfter(70) fails to send.
  await declareConflicting(`${prefix}${queue}.delay.70`);
  const box = inbox(async (r) => {
    if (r.message.id === 'first' && !r.message.redelivered) return r.delivery.retryAfter(70);
    return r.delivery.ack();
  });
  await bus.send(queue, {}, { messageId: 'first' });
  await bus.send(queue, {}, { messageId: 'second' });
  // One message at a time: a message left unacked would hold the only slot.
  const consumer = await bus.consume({ queue, prefetch: 1 }, box.handler);
  const first = await box.next();
  t.is(first.message.id, 'first');
  t.false(first.message.redelivered);
  const again = await box.next();
  t.is(again.message.id, 'first');
  t.true(again.message.redelivered);
  t.is((await box.next()).message.id, 'second');
  await consumer.cancel();
});

test.serial('a publish the broker never confirms (a blocked or stalled connection without heartbeats) fails as unavailable instead of waiting for ever', async (t) => {
  // Heartbeats off: nothing but the publish's own bound ends the wait (a blocked connection stays up).
  const bus = await createAmqpBus({ url: `${proxy.url('amqp', 'guest:guest')}/?heartbeat=0`, exchange, queuePrefix: prefix, logger, publishTimeoutMs: 300 });
  buses.push(bus);
  await bus.publish('stall.before', {}, { messageId: 'stall-0' });
  proxy.stall();
  t.teardown(() => proxy.resume());
  const error = await t.throwsAsync(bus.publish('stall.during', {}, { messageId: 'stall-1' }));
  t.is(error!.name, 'BusUnavailableError');
  proxy.resume();
  await bus.publish('stall.after', {}, { messageId: 'stall-2' });
  await bus.close();
});

test.serial('a consumer that cannot start after a reconnect (its queue redeclared elsewhere with other arguments) keeps neither publishing nor the other consumers down', async (t) => {
  const bus = await harness.openFaultyBus();
  const stamp = Date.now();
  // The one that will be refused first: a reconnect starts consumers in the order they were made.
  const stuck = inbox((r) => r.delivery.ack());
  await bus.consume({ queue: `refused_${stamp}`, bindings: ['refused.*'] }, stuck.handler);
  const healthy = inbox((r) => r.delivery.ack());
  await bus.consume({ queue: `healthy_${stamp}`, bindings: ['healthy.*'] }, healthy.handler);
  // Someone else takes the second queue's name with other arguments while the bus is away.
  proxy.cut();
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  const channel = await admin.createChannel();
  await channel.deleteQueue(`${prefix}refused_${stamp}`);
  await channel.assertQueue(`${prefix}refused_${stamp}`, { durable: true, arguments: { 'x-max-length': 1000 } });
  proxy.resume();
  // The bus comes back: publishing works and the healthy consumer is handed its message.
  let n = 0;
  await waitFor(() => bus.publish('healthy.ping', { n }, { messageId: `healthy-${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
  t.regex((await healthy.next()).message.id, /^healthy-/);
  t.is(await queueConsumers(admin, `${prefix}refused_${stamp}`), 0, 'the refused consumer is not running (it keeps retrying)');
});

test.serial('a consume that failed leaves no consumer behind for a reconnect to start', async (t) => {
  const bus = await harness.openFaultyBus();
  const stamp = Date.now();
  const refusedQueue = `${prefix}failed_${stamp}`;
  await declareConflicting(refusedQueue);
  const ghost = inbox((r) => r.delivery.ack());
  await t.throwsAsync(bus.consume({ queue: `failed_${stamp}` }, ghost.handler), { message: /PRECONDITION/ });
  const healthy = inbox((r) => r.delivery.ack());
  await bus.consume({ queue: `alive_${stamp}`, bindings: ['alive.*'] }, healthy.handler);
  // The conflict goes away, then the connection drops and comes back.
  const admin = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  await (await admin.createChannel()).deleteQueue(refusedQueue);
  proxy.cut();
  proxy.resume();
  let n = 0;
  await waitFor(() => bus.publish('alive.ping', { n }, { messageId: `alive-${n++}` }).then(() => true, () => false), 10_000, 'publishing after the reconnect');
  t.regex((await healthy.next()).message.id, /^alive-/); // consumers restart in order: the failed one would have come first
  t.is(await queueConsumers(admin, refusedQueue), 0);
});
