import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import {
  createLogger,
  createOutboxRelay,
  ManualClock,
  openRuntime,
  PgQueueBus,
  recordEvent,
  systemClock,
} from '../../services/kit/index.js';
import { openTestRuntime, testConfig } from '../helpers/env.js';
import { inbox } from '../helpers/inbox.js';
import { inMemoryKitDatabase } from '../helpers/kit-database.js';

// Where this process is the database's only client (the embedded database, which one process
// owns), every job and event is announced in the process, and the queue's shared look and the outbox relay's poll only catch what
// no announcement covers: delayed jobs, expired leases, a failed pass. Idle, they back off (doubling
// up to a bound) instead of reading the database several times a second for ever. What each waits
// is observed where it is decided (the bus's `look` event, the relay's `idleWaitMs` as each pass
// claims), never timed. Tests run one at a time: the relay test reads the statements sent.
const database = inMemoryKitDatabase(test);

const logger = createLogger({ level: 'silent', name: 't' });

/** The waits of `bus`'s next `n` looks, as each is scheduled. */
function looks(bus: PgQueueBus, n: number): Promise<number[]> {
  return new Promise((resolve) => {
    const waits: number[] = [];
    const listener = (event: { waitMs: number }) => {
      waits.push(event.waitMs);
      if (waits.length < n) return;
      bus.off('look', listener);
      resolve(waits);
    };
    bus.on('look', listener);
  });
}

test.serial('a sole writer\'s idle look doubles its wait up to the bound, and comes back to the period when it finds work', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'backoff.', clock: systemClock, logger, pollMs: 10, idlePollMaxMs: 80 });
  t.teardown(() => bus.close());
  const delivered = inbox<unknown>((r) => r.delivery.ack());
  const idle = looks(bus, 6);
  await bus.consume({ queue: 'q' }, delivered.handler);
  t.deepEqual(await idle, [10, 20, 40, 80, 80, 80]);

  // A job no wake-up announces (as one whose lease ran out): the backed-off look finds it, and the
  // look after its delivery waits the period again.
  const other = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'backoff.', clock: systemClock, logger, pollMs: 10 });
  t.teardown(() => other.close());
  const afterDelivery = new Promise<number>((resolve) => {
    const listener = (event: { waitMs: number }) => {
      if (delivered.items.length === 0) return;
      bus.off('look', listener);
      resolve(event.waitMs);
    };
    bus.on('look', listener);
  });
  await other.send('q', { n: 1 }, { messageId: 'unannounced' });
  const [found] = await delivered.until((items) => items.length >= 1);
  t.is(found!.message.id, 'unannounced');
  t.is(await afterDelivery, 10);
});

test.serial('without a bound the look keeps its period (other processes write the queues)', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'period.', clock: systemClock, logger, pollMs: 10 });
  t.teardown(() => bus.close());
  const idle = looks(bus, 5);
  await bus.consume({ queue: 'q' }, async (_message, delivery) => delivery.ack());
  t.deepEqual(await idle, [10, 10, 10, 10, 10]);
});

test.serial('a delayed job written by a sole writer is looked for when it is due, however far the look had backed off', async (t) => {
  const clock = new ManualClock(Date.now());
  // Both the period and the bound are longer than the test: only the due time can bring the look.
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'due.', clock, logger, pollMs: 600_000, idlePollMaxMs: 600_000 });
  t.teardown(() => bus.close());
  const delivered = inbox<unknown>((r) => r.delivery.ack());
  const first = looks(bus, 1);
  await bus.consume({ queue: 'q' }, delivered.handler);
  t.deepEqual(await first, [600_000]);

  const brought = looks(bus, 1);
  await bus.send('q', { n: 1 }, { messageId: 'later', delayMs: 50 });
  t.deepEqual(await brought, [50]);
  clock.advance(50);
  const [job] = await delivered.until((items) => items.length >= 1);
  t.is(job!.message.id, 'later');
});

test.serial('a retry asked of a sole writer is looked for when it is due', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'retry.', clock: systemClock, logger, pollMs: 600_000, idlePollMaxMs: 600_000 });
  t.teardown(() => bus.close());
  const seen: Array<{ id: string; attempt: string | undefined }> = [];
  const done = new Promise<void>((resolve) =>
    void bus.consume({ queue: 'q' }, async (message, delivery) => {
      seen.push({ id: message.id, attempt: message.headers['x-attempt'] });
      if (!message.headers['x-attempt']) return delivery.retryAfter(30, { 'x-attempt': '2' });
      await delivery.ack();
      resolve();
    }),
  );
  await bus.send('q', {}, { messageId: 'flaky' });
  await done;
  t.deepEqual(seen, [
    { id: 'flaky', attempt: undefined },
    { id: 'flaky', attempt: '2' },
  ]);
});

test.serial('a sole client\'s outbox relay backs off while nothing is published, and a commit brings it back', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'relay.', clock: systemClock, logger, pollMs: 10 });
  t.teardown(() => bus.close());
  const box = inbox<unknown>((r) => r.delivery.ack());
  await bus.consume({ queue: 'events', bindings: ['relay.#'] }, box.handler);
  const relay = createOutboxRelay({ knex: database().knex, bus, clock: systemClock, logger, pollMs: 10, idlePollMaxMs: 80 });
  await relay.drain(); // what earlier tests left is out of the way
  // The wait that came before each pass, read as the pass claims.
  const waits: number[] = [];
  let onWait: () => void = () => {};
  const onQuery = (query: { sql: string }) => {
    if (!/^update outbox_events set locked_until/i.test(query.sql.trim())) return;
    waits.push(relay.idleWaitMs);
    onWait();
  };
  database().knex.on('query', onQuery);
  t.teardown(async () => {
    database().knex.off('query', onQuery);
    await relay.stop();
  });
  const idle = new Promise<void>((resolve) => (onWait = () => waits.length >= 6 && resolve()));
  relay.start();
  await idle;
  t.deepEqual(waits.slice(0, 6), [10, 20, 40, 80, 80, 80]);

  const from = waits.length;
  const backedOffAgain = new Promise<void>((resolve) => (onWait = () => waits.slice(from).includes(20) && resolve()));
  const id = await recordEvent(database().knex, 'relay.created', { n: 1 });
  const [event] = await box.until((items) => items.length >= 1);
  t.is(event!.message.id, id);
  await backedOffAgain;
  // The commit's pass (woken during the longest wait, or that wait's own pass), then the period again, then doubling.
  t.regex(waits.slice(from).join(','), /^(80,)+10,20$/);
});

test.serial('the platform\'s runtime backs off on the embedded database and keeps the period on PostgreSQL', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 't-idle-backoff-'));
  const embedded = await openRuntime(
    testConfig({ DATABASE_URL: undefined, DATABASE_SCHEMA: undefined, AMQP_URL: undefined, DATA_DIR: dir, BUS_POLL_MS: '10', EMBEDDED_IDLE_POLL_MAX_MS: '40' }),
    { name: 'test', migrations: [] },
  );
  t.teardown(async () => {
    await embedded.close().catch(() => {});
    await rm(dir, { recursive: true, force: true });
  });
  const onPglite = looks(embedded.bus as PgQueueBus, 4);
  await embedded.bus.consume({ queue: 'q' }, async (_message, delivery) => delivery.ack());
  t.deepEqual(await onPglite, [10, 20, 40, 40]);
  t.true(embedded.db.soleClient);

  const shared = await openTestRuntime({ bus: 'pg', env: { BUS_POLL_MS: '10', EMBEDDED_IDLE_POLL_MAX_MS: '40' } });
  t.teardown(() => shared.dispose());
  const onPostgres = looks(shared.bus as PgQueueBus, 4);
  await shared.bus.consume({ queue: 'q' }, async (_message, delivery) => delivery.ack());
  t.deepEqual(await onPostgres, [10, 10, 10, 10]);
  t.false(shared.db.soleClient);
});
