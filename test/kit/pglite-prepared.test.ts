import { PGlite } from '@electric-sql/pglite';
import test from 'ava';
import { preparedStatements } from '../../services/kit/db/pglite-prepared.js';

// Repeated statements on the embedded database run as named prepared statements: the answers,
// errors and session state are the same as PGlite's own query(), and a schema change or a lost
// statement never leaves a stale plan answering.

async function open() {
  const db = new PGlite();
  await db.waitReady;
  await db.query('create table things (id text primary key, at timestamptz not null, n int8, doc jsonb, label text)');
  return db;
}

test('a repeated data statement is named on its second call and answers as PGlite does', async (t) => {
  const db = await open();
  const prepared = preparedStatements(db);
  const insert = 'insert into things (id, at, n, doc, label) select * from unnest($1::text[], $2::timestamptz[], $3::int8[], $4::jsonb[], $5::text[]) returning id';
  const at = new Date('2026-01-02T03:04:05.678Z');
  await prepared.query(insert, [['a'], [at], [1], [JSON.stringify({ k: 1 })], ['x']]);
  t.is(prepared.size, 0, 'a statement run once stays unnamed');
  const second = await prepared.query(insert, [['b', 'c'], [at, at], [2, null], [null, JSON.stringify([1, 'two'])], ['y', null]]);
  t.is(prepared.size, 1);
  t.deepEqual(second.rows, [{ id: 'b' }, { id: 'c' }]);
  t.is(second.affectedRows, 2);

  const select = 'select id, at, n, doc from things where id = any($1::text[]) order by id';
  const expected = await db.query(select, [['a', 'b', 'c']]);
  for (let i = 0; i < 3; i++) {
    const result = await prepared.query(select, [['a', 'b', 'c']]);
    t.deepEqual(result.rows, expected.rows);
    t.deepEqual(result.fields, expected.fields);
  }
  t.is(prepared.size, 2);
  const [row] = (await prepared.query(select, [['c']])).rows as Array<{ at: Date; n: number | null; doc: unknown }>;
  t.true(row!.at instanceof Date);
  t.is(row!.at.toISOString(), at.toISOString());
  t.is(row!.n, null);
  t.deepEqual(row!.doc, [1, 'two']);
  await db.close();
});

test('statements other than data statements, and those past the cap, run unnamed', async (t) => {
  const db = await open();
  const prepared = preparedStatements(db, { maxStatements: 1 });
  for (let i = 0; i < 3; i++) await prepared.query('set search_path to public');
  t.is(prepared.size, 0);
  for (let i = 0; i < 3; i++) await prepared.query('select 1 as one');
  t.is(prepared.size, 1);
  for (let i = 0; i < 3; i++) t.deepEqual((await prepared.query('select 2 as two')).rows, [{ two: 2 }]);
  t.is(prepared.size, 1);
  await db.close();
});

test('a database error keeps its code and the query text, and the session goes on', async (t) => {
  const db = await open();
  const prepared = preparedStatements(db);
  const insert = 'insert into things (id, at) values ($1, $2)';
  await prepared.query(insert, ['dup', new Date()]);
  await prepared.query(insert, ['other', new Date()]);
  t.is(prepared.size, 1);
  const error = await t.throwsAsync(prepared.query(insert, ['dup', new Date()]));
  t.is((error as Error & { code?: string }).code, '23505');
  t.is((error as Error & { query?: string }).query, insert);
  t.deepEqual((await prepared.query('select count(*)::int as n from things')).rows, [{ n: 2 }]);

  // Inside a transaction the error aborts it, as with an unnamed statement; rollback restores the session.
  await prepared.query('begin');
  await t.throwsAsync(prepared.query(insert, ['dup', new Date()]), { message: /duplicate key/ });
  await t.throwsAsync(prepared.query(insert, ['fresh', new Date()]), { message: /current transaction is aborted/ });
  await prepared.query('rollback');
  await prepared.query(insert, ['fresh', new Date()]);
  t.deepEqual((await db.query('select id from things order by id')).rows, [{ id: 'dup' }, { id: 'fresh' }, { id: 'other' }]);
  await db.close();
});

const SELECT_ROW = 'select * from things where id = $1';

/** A database with one row, and `select *` of it named by two calls; `name()` calls it twice again. */
async function withNamedSelect() {
  const db = await open();
  const prepared = preparedStatements(db);
  await db.query(`insert into things (id, at) values ('a', now())`);
  const name = async () => {
    for (let i = 0; i < 2; i++) await prepared.query(SELECT_ROW, ['a']);
  };
  await name();
  return { db, prepared, name };
}

test('a schema change closes the named statements, so a changed table answers in its new shape', async (t) => {
  const { db, prepared } = await withNamedSelect();
  t.is(prepared.size, 1);
  await prepared.query('alter table things add column extra text');
  t.is(prepared.size, 0);
  const result = await prepared.query(SELECT_ROW, ['a']);
  t.true(result.fields.some((f) => f.name === 'extra'));
  t.is((result.rows[0] as { extra: unknown }).extra, null);
  await db.close();
});

test('a named statement changed or dropped behind its back is run again unnamed outside a transaction', async (t) => {
  const { db, prepared, name } = await withNamedSelect();
  t.is(prepared.size, 1);

  // A change the statement cache did not see (another path to the same session).
  await db.query('alter table things add column extra text');
  const changed = await prepared.query(SELECT_ROW, ['a']);
  t.true(changed.fields.some((f) => f.name === 'extra'));
  t.is(prepared.size, 0);

  await name();
  t.is(prepared.size, 1);
  await db.query('deallocate all');
  t.is((await prepared.query(SELECT_ROW, ['a'])).rows.length, 1);
  t.is(prepared.size, 0);
  await db.close();
});
