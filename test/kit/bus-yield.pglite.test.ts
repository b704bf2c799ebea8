import test from 'ava';
import { createDatabase, createLogger, kitMigrations, migrateAll, PgQueueBus, systemClock, type Database } from '../../services/kit/index.js';
import { waitFor } from '../helpers/wait.js';

// On PGlite every query runs synchronously and resolves as a microtask: a consumer working through
// a backlog must still give the event loop back between jobs, or HTTP in the same process (the
// API, a webhook's own POST) starves until the backlog is gone. A macrotask probe counts how many
// jobs were handled each time it got to run; it must run while the backlog is being worked.
let db: Database;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [kitMigrations]);
});
test.after.always(async () => {
  await db?.close();
});

test('the embedded queue yields to timers and I/O while it works through a backlog', async (t) => {
  const bus = new PgQueueBus({ knex: db.knex, exchange: 'events', queuePrefix: 'yield.', clock: systemClock, logger: createLogger({ level: 'silent', name: 't' }), pollMs: 10_000 });
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
    await db.knex.raw('select 1');
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
