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
}

const ROWS = columnArrays<Row>([
  ['id', 'integer', (r) => r.id],
  ['label', 'text', (r) => r.label],
  ['count', 'bigint', (r) => r.count],
  ['ratio', 'double precision', (r) => r.ratio],
  ['flag', 'boolean', (r) => r.flag],
  ['at', 'timestamptz', (r) => r.at],
  ['meta', 'jsonb', (r) => r.meta],
]);

const at = new Date('2026-11-26T12:34:56.789Z');
const rows: Row[] = [
  { id: 1, label: 'plain', count: 9_007_199_254_740_991, ratio: 0.25, flag: true, at, meta: { a: 1 } },
  { id: 2, label: 'NULL', count: null, ratio: -1e-9, flag: false, at, meta: null },
  { id: 3, label: '{a,b},"c"\\d', count: undefined, ratio: 3, flag: null, at, meta: { quote: 'say "hi" \\ {x}', list: [1, null] } },
  { id: 4, label: '', count: 0, ratio: Number.NaN, flag: true, at, meta: {} },
  { id: 5, label: null, count: 1, ratio: 1.5, flag: true, at: new Date('2026-01-01T00:00:00Z'), meta: { emoji: '☕ é 中' } },
  { id: 6, label: ' spaced , comma\ttab\nline ', count: 2, ratio: Number.POSITIVE_INFINITY, flag: false, at, meta: null },
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
  };
}

async function roundTrip(knex: Knex) {
  await knex.raw('create temp table column_arrays_t (id integer, label text, count bigint, ratio double precision, flag boolean, at timestamptz, meta jsonb)');
  await knex.raw(`insert into column_arrays_t (${ROWS.names}) select ${ROWS.names} from ${ROWS.fromItem}`, ROWS.bind(rows));
  const back = await knex('column_arrays_t').select('*').orderBy('id');
  return back.map((r: Record<string, unknown>) => ({ ...r, count: r.count === null ? null : String(r.count), at: new Date(r.at as string).toISOString() }));
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
  t.is(ROWS.fromItem, 'unnest(?::integer[], ?::text[], ?::bigint[], ?::double precision[], ?::boolean[], ?::timestamptz[], ?::jsonb[]) as x(id, label, count, ratio, flag, at, meta)');
  t.is(ROWS.bind(Array.from({ length: 1000 }, () => rows[0]!)).length, 7);
  t.deepEqual(ROWS.bind([]), ['{}', '{}', '{}', '{}', '{}', '{}', '{}']);
});
