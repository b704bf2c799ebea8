import test from 'ava';
import knexFactory, { type Knex } from 'knex';
import { columnArrays, createDatabase, type Database } from '../../services/kit/index.js';
import { TEST_DATABASE_URL } from '../helpers/servers.js';

// Rows written as one array per column (the usage and request-log batches) read back exactly as
// they were, on PostgreSQL and on the embedded database: text that looks like array syntax or
// NULL, quotes and backslashes, Unicode, JSON, dates, booleans, and values that JSON would have
// written as null (absent, non-finite, an invalid date).
interface Row {
  id: number;
  label: string | null;
  count?: number | null;
  ratio: number;
  flag: boolean | null;
  at: Date;
  meta: Record<string, unknown> | null;
  /** A timestamp given in each form a column accepts: a date, epoch milliseconds or a string. */
  seen: Date | number | string | null;
}

const ROWS = columnArrays<Row>([
  ['id', 'integer', (r) => r.id],
  ['label', 'text', (r) => r.label],
  ['count', 'bigint', (r) => r.count],
  ['ratio', 'double precision', (r) => r.ratio],
  ['flag', 'boolean', (r) => r.flag],
  ['at', 'timestamptz', (r) => r.at],
  ['meta', 'jsonb', (r) => r.meta],
  ['seen', 'timestamptz', (r) => r.seen],
]);

const at = new Date('2026-11-26T12:34:56.789Z');
const rows: Row[] = [
  { id: 1, label: 'plain', count: 9_007_199_254_740_991, ratio: 0.25, flag: true, at, meta: { a: 1 }, seen: at.getTime() },
  { id: 2, label: 'NULL', count: null, ratio: -1e-9, flag: false, at, meta: null, seen: '2026-11-26T13:34:56.789+01:00' },
  { id: 3, label: '{a,b},"c"\\d', count: undefined, ratio: 3, flag: null, at, meta: { quote: 'say "hi" \\ {x}', list: [1, null] }, seen: null },
  { id: 4, label: '', count: 0, ratio: Number.NaN, flag: true, at, meta: {}, seen: new Date(Number.NaN) },
  { id: 5, label: null, count: 1, ratio: 1.5, flag: true, at: new Date('2026-01-01T00:00:00Z'), meta: { emoji: '☕ é 中' }, seen: new Date('1901-12-13T20:45:51.999Z') },
  { id: 6, label: ' spaced , comma\ttab\nline ', count: 2, ratio: Number.POSITIVE_INFINITY, flag: false, at, meta: null, seen: new Date('2230-02-28T23:59:59.001Z') },
];

function expected(row: Row) {
  return {
    id: row.id,
    label: row.label,
    count: row.count === undefined || row.count === null ? null : String(row.count),
    ratio: Number.isFinite(row.ratio) ? row.ratio : null,
    flag: row.flag,
    at: row.at.toISOString(),
    meta: row.meta,
    seen: row.seen === null || Number.isNaN(new Date(row.seen).getTime()) ? null : new Date(row.seen).toISOString(),
  };
}

async function roundTrip(knex: Knex) {
  await knex.raw('create temp table column_arrays_t (id integer, label text, count bigint, ratio double precision, flag boolean, at timestamptz, meta jsonb, seen timestamptz)');
  await knex.raw(`insert into column_arrays_t (${ROWS.names}) select ${ROWS.names} from ${ROWS.fromItem}`, ROWS.bind(rows));
  const back = await knex('column_arrays_t').select('*').orderBy('id');
  return back.map((r: Record<string, unknown>) => ({ ...r, count: r.count === null ? null : String(r.count), at: new Date(r.at as string).toISOString(), seen: r.seen === null ? null : new Date(r.seen as string).toISOString() }));
}

test('every value survives the trip through PostgreSQL', async (t) => {
  const knex = knexFactory({ client: 'pg', connection: TEST_DATABASE_URL, pool: { min: 1, max: 1 } });
  t.teardown(() => knex.destroy());
  t.deepEqual(await roundTrip(knex), rows.map(expected));
});

test('every value survives the trip through the embedded database', async (t) => {
  const db: Database = await createDatabase({ dataDir: '.', inMemory: true });
  t.teardown(() => db.close());
  t.deepEqual(await roundTrip(db.knex), rows.map(expected));
});

test('a batch binds one value per column whatever its size, and an empty batch is empty arrays', (t) => {
  t.is(
    ROWS.fromItem,
    "(select id, label, count, ratio, flag, timestamptz 'epoch' + at * interval '1 millisecond' as at, meta, timestamptz 'epoch' + seen * interval '1 millisecond' as seen" +
      ' from unnest(?::integer[], ?::text[], ?::bigint[], ?::double precision[], ?::boolean[], ?::bigint[], ?::jsonb[], ?::bigint[]) as u(id, label, count, ratio, flag, at, meta, seen)) as x',
  );
  t.is(ROWS.bind(Array.from({ length: 1000 }, () => rows[0]!)).length, 8);
  t.deepEqual(ROWS.bind([]), ['{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}']);
});

test('a timestamp travels as whole milliseconds since the epoch, NULL when absent or invalid', (t) => {
  const [, , , , , at, , seen] = ROWS.bind(rows);
  t.is(at, `{${rows.map((r) => r.at.getTime()).join(',')}}`);
  t.is(seen, '{1795696496789,1795696496789,NULL,NULL,-2147483648001,8209900799001}');
});
