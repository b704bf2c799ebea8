import test from 'ava';
import { createAmqpBus } from '../../services/kit/bus/amqp.js';
import { createDatabase, createLogger, kitMigrations, migrateAll, PgQueueBus, systemClock, type Bus, type Database } from '../../services/kit/index.js';
import { deleteAmqpTopology } from '../helpers/amqp.js';
import { dropSchema, TEST_AMQP_URL, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';

// Two platforms on one broker, told apart only by BUS_QUEUE_PREFIX (same BUS_EXCHANGE on purpose):
// each binds a spy queue with '#' and must see only its own platform's events. Ordering makes the
// absence meaningful: a foreign event published before our second event would reach our spy
// queue before it, so once our second event arrived, a leak would already be visible.
const logger = createLogger({ level: 'silent', name: 'bus-isolation-test' });
const name = uniqueName('busiso');
const sharedExchange = `${name}.events`;
const prefixA = `${name}.a.`;
const prefixB = `${name}.b.`;
let db: Database;
const buses: Bus[] = [];

test.before(async () => {
  db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema: name });
  await migrateAll(db.knex, [kitMigrations]);
});

test.after.always(async () => {
  for (const bus of buses) await bus.close().catch(() => {});
  await db?.close();
  await dropSchema(name);
  await deleteAmqpTopology(prefixA, sharedExchange);
  await deleteAmqpTopology(prefixB, sharedExchange);
});

async function spy(bus: Bus) {
  const seen: { key: string; id: string }[] = [];
  await bus.consume({ queue: 'spy', bindings: ['#'], prefetch: 1 }, async (message, delivery) => {
    seen.push({ key: message.routingKey, id: message.id });
    await delivery.ack();
  });
  return seen;
}

async function provesIsolation(t: import('ava').ExecutionContext, a: Bus, b: Bus) {
  const seenA = await spy(a);
  const seenB = await spy(b);
  await a.publish('conversation.created', { secret: 'platform A content' }, { messageId: 'a1' });
  await b.publish('conversation.created', { secret: 'platform B content' }, { messageId: 'b1' });
  await a.publish('model.added', {}, { messageId: 'a2' });
  await b.publish('model.added', {}, { messageId: 'b2' });
  await waitFor(() => seenA.some((m) => m.id === 'a2'), 15_000, 'A sees its second event');
  await waitFor(() => seenB.some((m) => m.id === 'b2'), 15_000, 'B sees its second event');
  t.deepEqual(seenA.map((m) => m.id), ['a1', 'a2']);
  t.deepEqual(seenB.map((m) => m.id), ['b1', 'b2']);
}

test.serial('RabbitMQ: two platforms with different BUS_QUEUE_PREFIX and the same BUS_EXCHANGE see nothing of each other', async (t) => {
  const open = async (queuePrefix: string) => {
    const bus = await createAmqpBus({ url: TEST_AMQP_URL, exchange: sharedExchange, queuePrefix, logger });
    buses.push(bus);
    return bus;
  };
  await provesIsolation(t, await open(prefixA), await open(prefixB));
  // The exchange itself is derived from the prefix: the base name alone was never declared.
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const { stdout } = await promisify(execFile)('rabbitmqctl', ['list_exchanges', '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
  const exchanges = stdout.split('\n').map((s) => s.trim());
  t.true(exchanges.includes(`${prefixA}${sharedExchange}`));
  t.true(exchanges.includes(`${prefixB}${sharedExchange}`));
  t.false(exchanges.includes(sharedExchange));
});

test.serial('PostgreSQL-backed queue: two platforms sharing one database, told apart by the prefix, see nothing of each other', async (t) => {
  const open = (queuePrefix: string) => {
    const bus = new PgQueueBus({ knex: db.knex, exchange: sharedExchange, queuePrefix, clock: systemClock, logger, pollMs: 15 });
    buses.push(bus);
    return bus;
  };
  await provesIsolation(t, open(prefixA), open(prefixB));
  // Every binding row carries its platform's prefix.
  const bindings = await db.knex('bus_bindings').select('exchange', 'queue');
  t.true(bindings.length >= 2);
  for (const row of bindings) {
    const prefix = row.queue.startsWith(prefixA) ? prefixA : prefixB;
    t.true(row.queue.startsWith(prefix));
    t.is(row.exchange, `${prefix}${sharedExchange}`);
  }
});
