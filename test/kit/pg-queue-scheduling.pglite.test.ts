import { once } from 'node:events';
import test from 'ava';
import { createLogger, PgQueueBus, systemClock } from '../../services/kit/index.js';
import { inMemoryKitDatabase } from '../helpers/kit-database.js';
import { waitFor } from '../helpers/wait.js';

// How the embedded queue schedules its consumers on PGlite.
// - Every query runs synchronously and resolves as a microtask: a consumer working through a backlog
//   must still give the event loop back between jobs, or HTTP in the same process (the API, a
//   webhook's own POST) starves until the backlog is gone. A macrotask probe counts how many jobs
//   were handled each time it got to run; it must run while the backlog is being worked.
// - Idle consumers share one look for ready jobs per period instead of each running its claiming
//   update (on the embedded default that polling was most of an idle platform's CPU); work that no
//   wake-up announces (a job another process queued) is still found by the look.
// The file's tests run one at a time: the idle test counts the statements sent to the database.
const database = inMemoryKitDatabase(test);

const logger = createLogger({ level: 'silent', name: 't' });

test.serial('the embedded queue yields to timers and I/O while it works through a backlog', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'yield.', clock: systemClock, logger, pollMs: 10_000 });
  t.teardown(() => bus.close());
  const total = 300;
  for (let i = 0; i < total; i++) await bus.send('work', { i }, { messageId: `m${i}` });
  let handled = 0;
  const seenByProbe: number[] = [];
  let probing = true;
  const probe = () => {
    seenByProbe.push(handled);
    if (probing) setImmediate(probe);
  };
  await bus.consume({ queue: 'work', prefetch: 32 }, async (_message, delivery) => {
    // A handler that only talks to the database, like the webhook fan-out.
    await database().knex.raw('select 1');
    handled++;
    await delivery.ack();
  });
  setImmediate(probe);
  await waitFor(() => handled === total, 30_000, 'backlog handled');
  probing = false;
  const during = seenByProbe.filter((n) => n > 0 && n < total);
  // Between jobs the probe ran several times, not once before and once after the whole backlog.
  t.true(new Set(during).size >= 3, `probe turns while the backlog was worked: ${new Set(during).size}`);
});


/** Resolves once `bus` has reported `n` more polls of `queue`. */
function polls(bus: PgQueueBus, queue: string, n: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const listener = (event: { queue: string }) => {
      if (event.queue !== queue || ++seen < n) return;
      bus.off('poll', listener);
      resolve();
    };
    bus.on('poll', listener);
  });
}

test.serial('idle consumers make one shared read per period and no claims; a job queued elsewhere is found by it and delivered', async (t) => {
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'idle.', clock: systemClock, logger, pollMs: 20 });
  t.teardown(() => bus.close());
  const delivered: string[] = [];
  for (const queue of ['a', 'b', 'c']) {
    await bus.consume({ queue }, async (message, delivery) => {
      delivered.push(`${queue}:${message.id}`);
      await delivery.ack();
    });
  }
  // Each consumer claims once when it starts; after that, count what the idle bus sends.
  await Promise.all(['a', 'b', 'c'].map((q) => polls(bus, `idle.${q}`, 1)));
  const statements: string[] = [];
  const onQuery = (query: { sql: string }) => statements.push(query.sql);
  database().knex.on('query', onQuery);
  await Promise.all(['a', 'b', 'c'].map((q) => polls(bus, `idle.${q}`, 5)));
  database().knex.off('query', onQuery);
  const claims = statements.filter((sql) => /^update bus_jobs/i.test(sql.trim()));
  const looks = statements.filter((sql) => /select distinct "queue" from "bus_jobs"/i.test(sql));
  t.is(claims.length, 0, `no consumer claimed while nothing was ready: ${JSON.stringify(claims)}`);
  t.true(looks.length >= 5 && looks.length <= 7, `one look served the three consumers each period (${looks.length} looks for 15 polls)`);

  // Another bus on the same database (another process) queues a job: nothing wakes this bus.
  const other = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'idle.', clock: systemClock, logger, pollMs: 20 });
  t.teardown(() => other.close());
  await other.send('b', { n: 1 }, { messageId: 'from-elsewhere' });
  while (!delivered.includes('b:from-elsewhere')) await once(bus, 'poll');
  t.deepEqual(delivered, ['b:from-elsewhere']);
});

test.serial('a wake-up (a send in this process) is delivered at once, without waiting for the shared look', async (t) => {
  // A period far longer than the test: only the wake-up can deliver in time.
  const bus = new PgQueueBus({ knex: database().knex, exchange: 'events', queuePrefix: 'wake.', clock: systemClock, logger, pollMs: 600_000 });
  t.teardown(() => bus.close());
  const delivered = new Promise<string>((resolve) =>
    void bus.consume({ queue: 'w' }, async (message, delivery) => {
      await delivery.ack();
      resolve(message.id);
    }),
  );
  await polls(bus, 'wake.w', 1);
  await bus.send('w', {}, { messageId: 'now' });
  t.is(await delivered, 'now');
});
