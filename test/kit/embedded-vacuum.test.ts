import test from 'ava';
import { createDatabase, vacuumWhereDue, type Database, type Logger } from '../../services/kit/index.js';

// The embedded database has no autovacuum (PGlite is PostgreSQL in single-user mode): a table whose
// rows are inserted and deleted, as the embedded queue's are, grows forever unless something
// vacuums it. The driver's own pass vacuums what autovacuum would, and leaves the rest alone.
let db: Database;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true, vacuumEveryMs: 0 });
  await db.knex.raw('create table churn (id bigserial primary key, queue text not null, state text not null)');
  await db.knex.raw('create index on churn (queue, state)');
  await db.knex.raw('create table append_only (id bigserial primary key, note text)');
});
test.after.always(async () => {
  await db?.close();
});

async function churn(rows: number) {
  await db.knex.raw(`insert into churn (queue, state) select 'q', 'ready' from generate_series(1, ?)`, [rows]);
  await db.knex.raw('delete from churn');
}

async function size(table: string): Promise<number> {
  const { rows } = await db.knex.raw('select pg_total_relation_size(?::regclass) as bytes', [table]);
  return Number(rows[0].bytes);
}

test.serial('without a vacuum a churning table only grows; with the pass after each round it stops growing', async (t) => {
  await churn(5000);
  const first = await size('churn');
  await churn(5000);
  await churn(5000);
  const unvacuumed = await size('churn');
  t.true(unvacuumed > first * 2, `three rounds unvacuumed: ${unvacuumed} bytes, one: ${first}`);

  const pass = await vacuumWhereDue(db.knex);
  t.true(pass.vacuumed.includes('public.churn'), JSON.stringify(pass));
  // The first round after a vacuum still extends the indexes (their freed pages are recycled only
  // by a later pass); from then on every round fits in the space the pass before it freed.
  await churn(5000);
  await vacuumWhereDue(db.knex);
  const steady = await size('churn');
  t.true(steady < unvacuumed);
  for (let round = 0; round < 6; round++) {
    await churn(5000);
    await vacuumWhereDue(db.knex);
  }
  const after = await size('churn');
  t.true(after <= steady, `six more rounds, each followed by the pass: ${after} bytes, steady at ${steady}`);
});

test.serial('a table is vacuumed only once its dead rows pass the threshold, and a table that only grew is analyzed', async (t) => {
  await vacuumWhereDue(db.knex);
  const quiet = await vacuumWhereDue(db.knex);
  t.deepEqual(quiet, { vacuumed: [], analyzed: [] }, 'nothing changed since the last pass');

  await db.knex.raw(`insert into churn (queue, state) select 'q', 'ready' from generate_series(1, 1000)`);
  await db.knex.raw('delete from churn where id in (select id from churn order by id limit 40)');
  await db.knex.raw(`insert into append_only (note) select 'n' from generate_series(1, 500)`);
  const pass = await vacuumWhereDue(db.knex);
  t.false(pass.vacuumed.includes('public.churn'), '40 dead rows of 1 000 are under 50 + 20 %');
  t.true(pass.analyzed.includes('public.churn'), 'but 1 040 changed rows call for fresh statistics');
  t.true(pass.analyzed.includes('public.append_only'));
  t.false(pass.vacuumed.includes('public.append_only'));
});

test('the embedded driver runs the pass on its own, and closing it waits for a pass in progress', async (t) => {
  const warnings: string[] = [];
  const logger = { warn: (_: unknown, message: string) => void warnings.push(message), error() {}, info() {}, debug() {} } as unknown as Logger;
  const own = await createDatabase({ dataDir: '.', inMemory: true, vacuumEveryMs: 20, logger });
  // The one connection runs one statement at a time, and knex reports each as it starts and ends:
  // a pass's first statement (the statistics flush) starting after the delete ended is a pass that
  // finds the deleted rows. The database is closed right then, while that pass is in progress.
  const events: string[] = [];
  let deleted = false;
  let closing: Promise<void> | undefined;
  own.knex.on('query-response', (_response: unknown, query: { sql: string }) => {
    if (query.sql === 'delete from jobs') deleted = true;
    if (query.sql.startsWith('vacuum')) events.push(query.sql);
  });
  const closed = new Promise<void>((resolve) =>
    own.knex.on('query', (query: { sql: string }) => {
      if (!deleted || closing || !query.sql.includes('pg_stat_force_next_flush')) return;
      events.push('pass started');
      closing = own.close().then(() => void events.push('closed'));
      resolve(closing);
    }),
  );
  await own.knex.raw('create table jobs (id bigserial primary key, body text)');
  await own.knex.raw(`insert into jobs (body) select 'x' from generate_series(1, 2000)`);
  await own.knex.raw('delete from jobs');
  await closed;
  t.deepEqual(events, ['pass started', 'vacuum (analyze) "public"."jobs"', 'closed'], 'the pass in progress ran to its end before the close');
  t.deepEqual(warnings, [], 'no pass failed');
});
