import amqp from 'amqplib';
import test from 'ava';
import { createAmqpBus } from '../../services/kit/bus/amqp.js';
import { createDatabase, createLogger, kitMigrations, migrateAll, type Bus, type Database } from '../../services/kit/index.js';
import { deleteAmqpTopology, queueDepth } from '../helpers/amqp.js';
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
    const bus = await createAmqpBus({ url, exchange, queuePrefix: prefix, logger, minBackoffMs: 20, maxBackoffMs: 200 });
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
