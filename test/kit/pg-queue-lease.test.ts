import test from 'ava';
import knexFactory from 'knex';
import { createDatabase, createLogger, kitMigrations, ManualClock, migrateAll, PgQueueBus, type Database } from '../../services/kit/index.js';
import { dropSchema, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { inbox } from '../helpers/inbox.js';
import { waitFor } from '../helpers/wait.js';

// The PostgreSQL-backed queue on the real PostgreSQL: a handler that runs longer than the lease keeps
// its job (no second consumer is handed it meanwhile), and a draining cancel waits for the handlers
// in flight, so a graceful stop that closes the bus next does not drop their acks; dead letters are
// counted and kept for their retention; a database outage is logged once, not once per poll.
const schema = uniqueName('buslease');
const logger = createLogger({ level: 'silent', name: 'bus-lease-test' });
let db: Database;

test.before(async () => {
  db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema });
  await migrateAll(db.knex, [kitMigrations]);
});

test.after.always(async () => {
  await db?.close();
  await dropSchema(schema);
});

test.serial('a handler running past the lease keeps its job: the lease is renewed and a second consumer is not handed it', async (t) => {
  const clock = new ManualClock(Date.now());
  const leaseMs = 300;
  const first = new PgQueueBus({ knex: db.knex, exchange: 'events', queuePrefix: 'lease.', clock, logger, pollMs: 15, leaseMs });
  const second = new PgQueueBus({ knex: db.knex, exchange: 'events', queuePrefix: 'lease.', clock, logger, pollMs: 15, leaseMs });
  t.teardown(() => Promise.all([first.close(), second.close()]));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const held = inbox(async (r) => {
    await released;
    await r.delivery.ack();
  });
  await first.consume({ queue: 'slow' }, held.handler);
  await first.send('slow', { n: 1 }, { messageId: 'slow-1' });
  t.is((await held.next()).message.id, 'slow-1');

  // The handler is still working long after its first lease would have run out: time passes in
  // steps shorter than the lease, each followed by a renewal.
  const leaseOf = async () => Number((await db.knex('bus_jobs').where({ message_id: 'slow-1' }).first('locked_until'))?.locked_until ?? 0);
  for (let step = 0; step < 6; step++) {
    clock.advance(leaseMs / 2);
    await waitFor(async () => (await leaseOf()) === clock.now() + leaseMs, 10_000, 'the lease renewed');
  }

  const other = inbox((r) => r.delivery.ack());
  const looked = new Promise<void>((resolve) => {
    let polls = 0;
    const onPoll = (event: { queue: string }) => {
      if (event.queue === 'lease.slow' && ++polls >= 3) {
        second.off('poll', onPoll);
        resolve();
      }
    };
    second.on('poll', onPoll);
  });
  await second.consume({ queue: 'slow' }, other.handler);
  await looked;
  await t.throwsAsync(other.next(0), { message: /no message arrived/ }, 'the second consumer was not handed the job');
  await t.throwsAsync(held.next(0), { message: /no message arrived/ }, 'nor the first one a second time');
  t.is(Number((await db.knex('bus_jobs').where({ message_id: 'slow-1' }).first('deliveries'))?.deliveries), 1);

  release();
  await waitFor(async () => (await db.knex('bus_jobs').where({ message_id: 'slow-1' }).first()) === undefined, 10_000, 'the ack');
});

test.serial('cancel with drainMs waits for the handlers in flight to settle, so closing the bus next keeps their acks', async (t) => {
  const clock = new ManualClock(Date.now());
  const bus = new PgQueueBus({ knex: db.knex, exchange: 'events', queuePrefix: 'drain.', clock, logger, pollMs: 15 });
  t.teardown(() => bus.close());
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let acked = false;
  const box = inbox(async (r) => {
    await released;
    await r.delivery.ack();
    acked = true;
  });
  const consumer = await bus.consume({ queue: 'work' }, box.handler);
  // The consumer's next look after claiming the job finds nothing: then it waits, idle.
  const idle = new Promise<void>((resolve) => {
    const onPoll = (event: { queue: string; claimed: number }) => {
      if (event.queue === 'drain.work' && event.claimed === 0 && box.items.length > 0) {
        bus.off('poll', onPoll);
        resolve();
      }
    };
    bus.on('poll', onPoll);
  });
  await bus.send('work', {}, { messageId: 'drain-1' });
  t.is((await box.next()).message.id, 'drain-1');
  await idle;
  // A graceful stop: stop taking jobs, let the one in flight finish, then close the bus.
  const stopped = consumer.cancel({ drainMs: 30_000 }).then(async () => {
    const settledBeforeClose = acked;
    await bus.close();
    return settledBeforeClose;
  });
  release();
  t.true(await stopped, 'the handler had settled when cancel resolved');
  t.is(await db.knex('bus_jobs').where({ message_id: 'drain-1' }).first(), undefined, 'the ack reached the queue');
});

test.serial('dead letters: counted per queue in the backlog, and those past the retention are deleted when the queue dead-letters another', async (t) => {
  const clock = new ManualClock(Date.now());
  const bus = new PgQueueBus({ knex: db.knex, exchange: 'events', queuePrefix: 'dead.', clock, logger, pollMs: 15, deadRetentionMs: 60_000 });
  t.teardown(() => bus.close());
  const box = inbox((r) => r.delivery.deadLetter());
  await bus.consume({ queue: 'poison' }, box.handler);
  const deadIds = async () => (await db.knex('bus_jobs').where({ queue: 'dead.poison', state: 'dead' }).orderBy('id').select('message_id')).map((r) => r.message_id as string);

  await bus.send('poison', { n: 1 }, { messageId: 'p1' });
  await box.next();
  await waitFor(async () => (await deadIds()).length === 1, 10_000, 'the first dead letter');
  clock.advance(30_000);
  await bus.send('poison', { n: 2 }, { messageId: 'p2' });
  await box.next();
  await waitFor(async () => (await deadIds()).length === 2, 10_000, 'the second dead letter');
  t.like((await bus.backlog()).find((b) => b.queue === 'poison'), { ready: 0, dead: 2 });

  // p1 died 61 s before p3: past the retention, it goes when p3 dies; p2 (31 s) stays.
  clock.advance(31_000);
  await bus.send('poison', { n: 3 }, { messageId: 'p3' });
  await box.next();
  t.deepEqual(await waitFor(async () => ((await deadIds()).includes('p3') ? deadIds() : undefined), 10_000, 'the third dead letter'), ['p2', 'p3']);
  t.like((await bus.backlog()).find((b) => b.queue === 'poison'), { dead: 2 });
});

/** Knex's own warnings (each failed connection attempt), which the cut makes many of. */
const QUIET = { warn() {}, error() {}, debug() {}, deprecate() {} };

test.serial('a database outage is logged once per outage, however many consumers poll meanwhile, and so is its end', async (t) => {
  const lines: Array<{ level: number; msg: string }> = [];
  const recorded = createLogger({ level: 'info', name: 'bus-outage-test' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  // The bus reaches PostgreSQL through a TCP proxy that the test cuts: every claim then fails.
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: 5432 });
  t.teardown(() => proxy.close());
  const url = new URL(TEST_DATABASE_URL);
  url.port = String(proxy.port);
  const knex = knexFactory({ client: 'pg', connection: url.toString(), searchPath: [schema], pool: { min: 0, max: 2 }, acquireConnectionTimeout: 1000, log: QUIET });
  t.teardown(() => knex.destroy());
  const bus = new PgQueueBus({ knex, exchange: 'events', queuePrefix: 'outage.', clock: new ManualClock(Date.now()), logger: recorded, pollMs: 15 });
  t.teardown(() => bus.close());
  const polls = (n: number) =>
    new Promise<void>((resolve) => {
      let seen = 0;
      const onPoll = () => {
        if (++seen >= n) {
          bus.off('poll', onPoll);
          resolve();
        }
      };
      bus.on('poll', onPoll);
    });
  const box = inbox((r) => r.delivery.ack());
  await bus.consume({ queue: 'a' }, box.handler);
  await bus.consume({ queue: 'b' }, box.handler);
  proxy.cut();
  await polls(20);
  const failures = () => lines.filter((l) => l.msg.startsWith('bus poll failed'));
  t.is(failures().length, 1, 'one warning for the whole outage');
  proxy.resume();
  await bus.send('a', { n: 1 }, { messageId: 'after-outage' });
  t.is((await box.next()).message.id, 'after-outage');
  t.is(lines.filter((l) => l.msg === 'bus poll recovered').length, 1);
  // A second outage is reported again.
  proxy.cut();
  await polls(10);
  t.is(failures().length, 2);
});
