import { messages, parse, protocol, type PGlite, type Results } from '@electric-sql/pglite';

const { serialize } = protocol;

/**
 * Repeated statements on the embedded database, parsed and planned once per session: PGlite's
 * `query()` sends every statement as an unnamed one, so PostgreSQL parses, analyses and plans it
 * again on each call. For a usage batch of 25 rows that was about half of the statement's time
 * (bench/README.md, "Thirty-first pass"), which made small batches cost more per row than large
 * ones. Here a data statement (select, insert, update, delete, with) seen a second time
 * becomes a named prepared statement, as the `pg` driver does for a query given a name, and later
 * calls only bind and execute it; PostgreSQL's plan cache then chooses a generic plan where it
 * costs no more than the custom ones.
 *
 * - At most `maxStatements` are named, none ever evicted: a plan sits in WebAssembly memory that
 *   never shrinks, and a platform's repeated statements are a fixed set. Statements beyond run
 *   unnamed, as before.
 * - A schema change (create, alter, drop…) closes every named statement, so none can answer with
 *   rows of a shape it was prepared for ("cached plan must not change result type"). A named
 *   statement that fails that way, or has gone, is dropped and, outside a transaction, run again
 *   unnamed.
 * - Results, errors and parameter serialisation are PGlite's own (`parseResults`, its serializers),
 *   so a caller sees the same answer either way.
 */
export interface PreparedStatementsOptions {
  /** How many statements may be named in the session. Default 128. */
  maxStatements?: number;
}

interface Prepared {
  name: string;
  paramTypes: number[];
}

export interface PreparedStatements {
  query(sql: string, params?: unknown[]): Promise<Results<unknown>>;
  /** How many statements are named now (tests, diagnostics). */
  readonly size: number;
}

const DATA_STATEMENT = /^\s*(select|insert|update|delete|with)\b/i;
const SCHEMA_CHANGE = /^\s*(create|alter|drop|comment|do|reindex|cluster)\b/i;
/** A text is named on its second call: statements run once (migrations, one-off reads) stay unnamed. */
const PREPARE_ON_CALL = 2;
/** How many distinct texts are counted before the counts start over, so one-off texts cannot pile up. */
const MAX_COUNTED = 1024;

export function preparedStatements(db: PGlite, options: PreparedStatementsOptions = {}): PreparedStatements {
  const maxStatements = options.maxStatements ?? 128;
  const named = new Map<string, Prepared>();
  const calls = new Map<string, number>();
  let sequence = 0;

  const wantsName = (sql: string): boolean => {
    if (named.size >= maxStatements || !DATA_STATEMENT.test(sql)) return false;
    if (calls.size >= MAX_COUNTED && !calls.has(sql)) calls.clear();
    const count = (calls.get(sql) ?? 0) + 1;
    calls.set(sql, count);
    if (count < PREPARE_ON_CALL) return false;
    calls.delete(sql);
    return true;
  };

  const run = async (bytes: Uint8Array[], sql: string, params: unknown[] | undefined) => {
    try {
      return await db.execProtocolStream(concat(bytes), { syncToFs: false });
    } catch (error) {
      // As PGlite's own query() marks a database error with what was asked.
      if (error instanceof messages.DatabaseError) Object.assign(error, { query: sql, params });
      throw error;
    }
  };

  const prepare = async (sql: string): Promise<Prepared> => {
    const name = `pglite_prepared_${sequence++}`;
    const answer = await run([serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()], sql, undefined);
    const statement = { name, paramTypes: parse.parseDescribeStatementResults(answer) };
    named.set(sql, statement);
    return statement;
  };

  const execute = async (statement: Prepared, sql: string, params: unknown[]): Promise<Results<unknown>> => {
    const values = params.map((value, i) => {
      if (value === null || value === undefined) return null;
      const serializer = db.serializers[statement.paramTypes[i]];
      return serializer ? serializer(value) : String(value);
    });
    const answer = await run(
      [serialize.bind({ statement: statement.name, values }), serialize.describe({ type: 'P' }), serialize.execute({}), serialize.sync()],
      sql,
      params,
    );
    return parse.parseResults(answer, db.parsers)[0];
  };

  const forget = async (sqls: string[]) => {
    const closes: Uint8Array[] = [];
    for (const sql of sqls) {
      const statement = named.get(sql);
      if (!statement) continue;
      named.delete(sql);
      closes.push(serialize.close({ type: 'S', name: statement.name }));
    }
    if (closes.length > 0) await db.execProtocolStream(concat([...closes, serialize.sync()]), { syncToFs: false });
  };

  const stale = (error: unknown) => {
    const { code, message } = error as { code?: string; message?: string };
    return code === '26000' || (code === '0A000' && /cached plan/.test(message ?? ''));
  };

  return {
    get size() {
      return named.size;
    },
    async query(sql, params = []) {
      if (SCHEMA_CHANGE.test(sql)) {
        const result = await db.query(sql, params);
        if (named.size > 0) await db.runExclusive(() => forget([...named.keys()]));
        return result;
      }
      if (!named.has(sql) && !wantsName(sql)) return db.query(sql, params);
      try {
        const result = await db.runExclusive(async () => execute(named.get(sql) ?? (await prepare(sql)), sql, params));
        await db.syncToFs();
        return result;
      } catch (error) {
        if (!stale(error)) throw error;
        // A close that fails leaves one unused statement in the session; the caller's error matters more.
        await db.runExclusive(() => forget([sql])).catch(() => {});
        if (db.isInTransaction()) throw error;
        return db.query(sql, params);
      }
    },
  };
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
