/**
 * Many rows in one statement as one PostgreSQL array per column, expanded by `unnest`:
 *
 *   insert into t (a, b) select a, b from (select a, b from unnest(?::text[], ?::integer[]) as u(a, b)) as x
 *
 * Each array is one bound text value, so a batch of any size binds as many values as it has
 * columns. PostgreSQL parses an array literal much faster than the same rows as JSON through
 * `jsonb_to_recordset` (the embedded database: ~30 against ~45 µs per row of the request log, ~53
 * against ~72 of the usage insert, indexes included), and knex never places a value per row.
 *
 * A `timestamptz` column travels as whole milliseconds since the Unix epoch (a `bigint` array)
 * and becomes a timestamp in the from-item: PostgreSQL's date-time parser costs ~1.4 µs per
 * element of an ISO 8601 array in the embedded database, an integer and the addition ~0.5. The
 * value is exact: a JavaScript date holds whole milliseconds, and the interval arithmetic is
 * exact in microseconds for any date within ±285 years of 1970.
 */

/** The PostgreSQL types a column array can have. */
export type ColumnType = 'text' | 'integer' | 'bigint' | 'boolean' | 'double precision' | 'timestamptz' | 'jsonb';

/**
 * One column: its name, its type and how a row gives its value (`null`/`undefined` are SQL NULL).
 * A `timestamptz` value is a `Date`, milliseconds since the epoch, or a string `Date.parse` reads.
 */
export type ArrayColumn<Row> = readonly [name: string, type: ColumnType, value: (row: Row) => unknown];

export interface ColumnArrays<Row> {
  /** `(select … from unnest(?::text[], …) as u(a, …)) as x`: a from-item with the columns by name, whose bindings `bind(rows)` gives, in order. */
  fromItem: string;
  /** The columns' names, comma-separated, in order. */
  names: string;
  bind(rows: readonly Row[]): string[];
}

/** How a column's values travel: the array's element type, the element text, and the expression that reads the column back. */
interface Transport {
  arrayType: string;
  element: (v: unknown) => string;
  read: (name: string) => string;
}

const transportOf = (type: ColumnType): Transport =>
  type === 'timestamptz'
    ? { arrayType: 'bigint', element: epochMillisElement, read: (name) => `timestamptz 'epoch' + ${name} * interval '1 millisecond' as ${name}` }
    : { arrayType: type, element, read: (name) => name };

export function columnArrays<Row>(columns: readonly ArrayColumn<Row>[], alias = 'x'): ColumnArrays<Row> {
  const names = columns.map(([name]) => name).join(', ');
  const transports = columns.map(([, type]) => transportOf(type));
  const arrays = transports.map((t) => `?::${t.arrayType}[]`).join(', ');
  const selected = columns.map(([name], i) => transports[i]!.read(name)).join(', ');
  return {
    fromItem: `(select ${selected} from unnest(${arrays}) as u(${names})) as ${alias}`,
    names,
    bind: (rows) => columns.map(([, , value], i) => arrayLiteral(rows, value, transports[i]!.element)),
  };
}

const NEEDS_ESCAPE = /["\\]/;
const ESCAPED = /["\\]/g;

/**
 * `{"a","b",NULL,3,t}`: strings, dates (ISO 8601) and objects (JSON) quoted with `"` and `\` escaped.
 * Joined, not appended: appending builds a chain of string pieces, which the copy of the batch to
 * the embedded database's worker (or to the pg driver's buffer) then has to flatten piece by piece.
 */
function arrayLiteral<Row>(rows: readonly Row[], value: (row: Row) => unknown, toElement: (v: unknown) => string): string {
  const elements = new Array<string>(rows.length);
  for (let i = 0; i < rows.length; i++) elements[i] = toElement(value(rows[i]!));
  return `{${elements.join(',')}}`;
}

function element(v: unknown): string {
  // NULL wherever JSON would have said null: absent values, non-finite numbers, invalid dates.
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : 'NULL';
  if (typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return v ? 't' : 'f';
  if (v instanceof Date && Number.isNaN(v.getTime())) return 'NULL';
  const text = v instanceof Date ? v.toISOString() : typeof v === 'object' ? JSON.stringify(v) : String(v);
  return `"${NEEDS_ESCAPE.test(text) ? text.replace(ESCAPED, '\\$&') : text}"`;
}

/** A `timestamptz` element: whole milliseconds since the epoch, NULL for an absent or invalid date. */
function epochMillisElement(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  const ms = v instanceof Date ? v.getTime() : typeof v === 'number' ? v : Date.parse(String(v));
  return Number.isFinite(ms) ? String(Math.round(ms)) : 'NULL';
}
