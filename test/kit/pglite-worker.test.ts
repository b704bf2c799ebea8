import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { createDatabase, type Database } from '../../services/kit/index.js';

// The embedded database runs in a worker thread behind knex: same results as before (types,
// errors, transactions), and the main thread keeps serving while a query runs.
let db: Database;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await db.knex.raw('create table things (id text primary key, at timestamptz not null, data bytea, n int8, doc jsonb)');
});

test.after.always(async () => {
  await db?.close();
});

test('rows keep their types across the thread boundary', async (t) => {
  const at = new Date('2026-01-02T03:04:05.678Z');
  await db.knex('things').insert({ id: 'a', at, data: Buffer.from([1, 2, 255]), n: 42, doc: JSON.stringify({ k: [1, 'two'] }) });
  const row = await db.knex('things').where({ id: 'a' }).first();
  t.true(row.at instanceof Date);
  t.is(row.at.toISOString(), at.toISOString());
  t.deepEqual(Array.from(row.data as Uint8Array), [1, 2, 255]);
  t.is(row.n, 42);
  t.deepEqual(row.doc, { k: [1, 'two'] });
  const [{ count }] = await db.knex('things').where({ id: 'a' }).count({ count: '*' });
  t.is(count, 1);
});

test('del, update and increment answer the affected row count, as on PostgreSQL; with returning, the rows', async (t) => {
  const at = new Date();
  await db.knex('things').insert([1, 2, 3].map((i) => ({ id: `count-${i}`, at, n: i })));
  const counted = () => db.knex('things').where('id', 'like', 'count-%');
  t.is(await counted().clone().update({ n: 7 }), 3);
  t.is(await counted().clone().increment('n', 1), 3);
  // A batch delete by a limited subquery, as stores prune: a number a loop can compare.
  t.is(await db.knex('things').whereIn('id', counted().clone().select('id').limit(2)).del(), 2);
  const [row] = await counted().clone().del().returning('id');
  t.deepEqual(row, { id: 'count-3' });
  t.is(await counted().clone().del(), 0);
});

test('a database error keeps its SQLSTATE code (domain code maps 23505 to a 409)', async (t) => {
  await db.knex('things').insert({ id: 'dup', at: new Date() });
  const error = await t.throwsAsync(db.knex('things').insert({ id: 'dup', at: new Date() }));
  t.is((error as Error & { code?: string }).code, '23505');
  t.regex(error!.message, /duplicate key/);
});

test('a transaction runs on the worker session: rollback undoes, commit keeps', async (t) => {
  await t.throwsAsync(
    db.knex.transaction(async (trx) => {
      await trx('things').insert({ id: 'rolled', at: new Date() });
      throw new Error('abort');
    }),
    { message: 'abort' },
  );
  await db.knex.transaction(async (trx) => {
    await trx('things').insert({ id: 'kept', at: new Date() });
  });
  const ids = (await db.knex('things').whereIn('id', ['rolled', 'kept']).pluck('id')) as string[];
  t.deepEqual(ids, ['kept']);
});

test('the main thread keeps running while a query executes', async (t) => {
  // pg_sleep inside PGlite is synchronous WebAssembly: on the main thread no callback could run
  // until it returned. Count event-loop turns while it runs.
  let turns = 0;
  let done = false;
  const query = db.knex.raw('select pg_sleep(0.3)').then(() => (done = true));
  while (!done) {
    await new Promise((resolve) => setImmediate(resolve));
    turns++;
  }
  await query;
  t.true(turns > 10, `only ${turns} event-loop turns while the query ran`);
});

const sharedBuffers = async (database: Database) => ((await database.knex.raw('show shared_buffers')).rows[0] as { shared_buffers: string }).shared_buffers;

test("the buffer pool is 16 MB unless configured, not PostgreSQL's 128 MB", async (t) => {
  t.is(await sharedBuffers(db), '16MB');
});

test('ANALYZE works from statistics target 10 (PostgreSQL: 100): 3 000-row samples, 10 histogram buckets, and still the statistics the planner needs', async (t) => {
  t.is(((await db.knex.raw('show default_statistics_target')).rows[0] as { default_statistics_target: string }).default_statistics_target, '10');
  await db.knex.raw(`create table sampled as select g as id, (g % 7)::text as kind from generate_series(1, 20000) g`);
  await db.knex.raw('analyze sampled');
  const column = async (name: string) =>
    (await db.knex.raw(`select n_distinct, array_length(most_common_vals::text::text[], 1) as mcv, array_length(histogram_bounds::text::text[], 1) as bounds from pg_stats where tablename = 'sampled' and attname = ?`, [name])).rows[0] as { n_distinct: number; mcv: number | null; bounds: number | null };
  const kind = await column('kind');
  t.is(kind.n_distinct, 7);
  t.is(kind.mcv, 7);
  t.is((await column('id')).bounds, 11);
  const [{ reltuples }] = (await db.knex.raw(`select reltuples from pg_class where relname = 'sampled'`)).rows as Array<{ reltuples: number }>;
  t.is(reltuples, 20000);
});

test('a data directory is opened, closed and reopened with its data, and each open takes its own buffer pool size', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'pglite-worker-'));
  try {
    const first = await createDatabase({ dataDir: dir, embeddedBuffersMb: 8 });
    t.is(await sharedBuffers(first), '8MB');
    await first.knex.raw('create table kept (v text)');
    await first.knex('kept').insert({ v: 'still here' });
    await first.close();
    const second = await createDatabase({ dataDir: dir, embeddedBuffersMb: 24 });
    t.deepEqual(await second.knex('kept').pluck('v'), ['still here']);
    t.is(await sharedBuffers(second), '24MB');
    await second.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

// Serial: a schema change in another test (create table) closes the named statements.
test.serial('repeated statements stay prepared in the worker unless the setting is 0', async (t) => {
  const preparedTexts = async (database: Database) =>
    (await database.knex.raw('select statement from pg_prepared_statements where not from_sql')).rows.map((r: { statement: string }) => r.statement);
  const lookup = (database: Database) => database.knex('things').where({ id: 'prepared-probe' }).first();
  await lookup(db);
  t.false((await preparedTexts(db)).some((text: string) => text.includes('prepared-probe') || /from "things" where "id" = \$1/.test(text)), 'once: unnamed');
  await lookup(db);
  t.true((await preparedTexts(db)).some((text: string) => /from "things" where "id" = \$1/.test(text)), 'twice: named');

  const unprepared = await createDatabase({ dataDir: '.', inMemory: true, embeddedPreparedStatements: 0 });
  try {
    await unprepared.knex.raw('create table things (id text primary key)');
    for (let i = 0; i < 3; i++) await lookup(unprepared);
    t.deepEqual(await preparedTexts(unprepared), []);
  } finally {
    await unprepared.close();
  }
});
