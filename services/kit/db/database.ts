import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import knexFactory, { type Knex } from 'knex';
import pg from 'pg';
import ClientPgLite from 'knex-pglite';
import { MAX_TIMER_MS } from '../config.js';
import type { Logger } from '../logger.js';
import { startEmbeddedVacuum } from './embedded-vacuum.js';
import { DEFAULT_EMBEDDED_BUFFERS_MB, DEFAULT_EMBEDDED_PREPARED_STATEMENTS, startPGliteWorker } from './pglite-remote.js';

// node-pg returns int8 (count(*), bigserial) as strings; PGlite returns numbers. Make them agree.
pg.types.setTypeParser(20, (value) => Number(value));

export interface DatabaseOptions {
  /** `DATABASE_URL`: PostgreSQL through pg. Unset: PGlite under `dataDir`. */
  url?: string;
  dataDir: string;
  /** A schema to work in (created if missing); tests give each file its own. */
  schema?: string;
  poolMax?: number;
  /**
   * PostgreSQL: the server cancels a statement running longer (`statement_timeout`); a query whose
   * answer does not arrive `QUERY_TIMEOUT_GRACE_MS` later fails on the client (a stalled server or
   * network never answers, not even with the cancellation). 0: no limit. Default 30 s.
   */
  queryTimeoutMs?: number;
  /** PostgreSQL: opening a connection and waiting for a pooled one each fail after this long. Default 10 s. */
  connectTimeoutMs?: number;
  /** Where knex's own warnings go (a refused connection while the server is down, once per attempt); unset: the console. */
  logger?: Logger;
  /**
   * PGlite only: PostgreSQL's buffer pool (`shared_buffers`), in MiB. Default 16. The pool sits in
   * PGlite's WebAssembly memory, which never shrinks, and is resident from the start: PostgreSQL's
   * own default (128 MB) cost ~120 MiB more. The data directory's files stay in the operating
   * system's page cache either way, so a miss in a small pool is a read from memory.
   */
  embeddedBuffersMb?: number;
  /**
   * PGlite only: how many repeated statements stay parsed and planned for the session (named
   * prepared statements, `pglite-prepared.ts`). Default 128; 0: every statement is parsed and
   * planned on each call.
   */
  embeddedPreparedStatements?: number;
  /** PGlite only: keep the database in memory (tests of the embedded driver). */
  inMemory?: boolean;
  /**
   * PGlite only: how often the embedded autovacuum looks for tables to vacuum or analyze
   * (`embedded-vacuum.ts`; PGlite has no autovacuum of its own). Default 60 s; 0: never.
   */
  vacuumEveryMs?: number;
}

export interface Database {
  knex: Knex;
  driver: 'postgres' | 'pglite';
  /**
   * PGlite has one connection: a query outside an open transaction waits for it. Code that must
   * not hold a transaction while other work runs (pollers, relays) checks this to stay short.
   */
  singleConnection: boolean;
  /**
   * Only this process reaches the database (PGlite: one process owns its data directory), so every
   * write is made here and one announced in the process needs no poll to be found. Pollers that
   * exist for other processes' writes (the queue's shared look, the outbox relay) back off while idle.
   */
  soleClient: boolean;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export async function createDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.url) {
    const queryTimeoutMs = options.queryTimeoutMs ?? 30_000;
    const connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    const knex = knexFactory({
      client: 'pg',
      connection: {
        connectionString: options.url,
        connectionTimeoutMillis: connectTimeoutMs,
        // The client's bound is a Node timer: past its longest delay it would fire at once and fail every query.
        ...(queryTimeoutMs > 0 ? { statement_timeout: queryTimeoutMs, query_timeout: Math.min(queryTimeoutMs + QUERY_TIMEOUT_GRACE_MS, MAX_TIMER_MS) } : {}),
      } as Knex.PgConnectionConfig,
      // DATABASE_CONNECT_TIMEOUT_MS bounds opening a connection (pg's connect, and the pool's own
      // wait for it: tarn's createTimeoutMillis, 30 s unless set) and waiting for one from the pool
      // (acquireConnectionTimeout, which includes opening one when none is free).
      pool: { min: 0, max: options.poolMax ?? 10, afterCreate: dropAfterReadTimeout, createTimeoutMillis: connectTimeoutMs },
      searchPath: options.schema ? [options.schema] : undefined,
      acquireConnectionTimeout: connectTimeoutMs,
      log: knexLog(options.logger),
    });
    if (options.schema) await ensureSchema(knex, options.schema);
    return wrap(knex, 'postgres');
  }
  let dir: string | undefined;
  if (!options.inMemory) {
    dir = resolve(options.dataDir, 'pglite');
    mkdirSync(dir, { recursive: true });
  }
  // PGlite runs each query synchronously in WebAssembly; in a worker thread it never blocks the
  // requests this thread serves. knex-pglite drives it through the same three members.
  const pglite = startPGliteWorker(dir, {
    buffersMb: options.embeddedBuffersMb ?? DEFAULT_EMBEDDED_BUFFERS_MB,
    preparedStatements: options.embeddedPreparedStatements ?? DEFAULT_EMBEDDED_PREPARED_STATEMENTS,
  });
  // Opening a data directory can take many seconds on a busy disk; wait for it here, so that the
  // acquire timeout below bounds waiting for the one connection, not PGlite's start.
  try {
    await pglite.waitReady;
  } catch (error) {
    await pglite.close();
    throw error;
  }
  const knex = knexFactory({
    client: ClientPgLiteCounts as unknown as typeof knexFactory.Client,
    connection: { pglite } as unknown as Knex.StaticConnectionConfig,
    searchPath: options.schema ? [options.schema] : undefined,
    // A waiting query fails instead of hanging forever if someone holds the one connection too long.
    acquireConnectionTimeout: 30_000,
  });
  if (options.schema) await ensureSchema(knex, options.schema);
  const everyMs = options.vacuumEveryMs ?? 60_000;
  const vacuum = everyMs > 0 ? startEmbeddedVacuum(knex, { everyMs, logger: options.logger }) : undefined;
  return wrap(knex, 'pglite', () => vacuum?.stop());
}

/**
 * knex-pglite names a statement's command after knex's method, and knex's PostgreSQL client answers
 * the affected row count only for `DELETE` and `UPDATE`: so a `del()` (method `del`) or an
 * `increment()` (method `counter`) would answer the whole driver response where PostgreSQL answers a
 * number, and a store's `deleted < batch` would never be true. Counted here as pg counts them.
 */
const ClientPgLiteCounts = class extends (ClientPgLite as unknown as new (config: unknown) => { processResponse(obj: unknown, runner: unknown): unknown }) {
  override processResponse(obj: { method?: string; output?: unknown; returning?: unknown; response?: { affectedRows?: number } }, runner: unknown): unknown {
    if ((obj.method === 'del' || obj.method === 'counter') && !obj.output && !obj.returning) return obj.response?.affectedRows ?? 0;
    return super.processResponse(obj, runner);
  }
};

/**
 * `if not exists` is checked before the insert into the catalog, so two processes creating the
 * schema at the same moment can both pass it, and the second fails on the catalog's unique index.
 */
async function ensureSchema(knex: Knex, schema: string): Promise<void> {
  try {
    await knex.raw('create schema if not exists ??', [schema]);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== '23505' && code !== '42P06') throw error;
  }
}

function knexLog(logger: Logger | undefined): Knex.Logger | undefined {
  if (!logger) return undefined;
  return {
    warn: (message: unknown) => logger.warn({ err: String(message) }, 'database driver warning'),
    error: (message: unknown) => logger.error({ err: String(message) }, 'database driver error'),
    deprecate: (method: string, alternative: string) => logger.warn({ method, alternative }, 'database driver deprecation'),
    debug: () => {},
  };
}

// Room for the server's own cancellation (statement_timeout) to arrive first: that answer keeps the
// connection usable, while a client-side timeout has to discard it.
const QUERY_TIMEOUT_GRACE_MS = 2_000;

type PgConnection = {
  query: (...args: unknown[]) => unknown;
  __knex__disposed?: unknown;
};

/**
 * After pg's client-side `query_timeout`, the connection still waits for the lost query's answer
 * and would queue every later query behind it. Marking it disposed (knex's own flag for a broken
 * connection) makes the pool destroy it instead of lending it again.
 */
function dropAfterReadTimeout(connection: PgConnection, done: (error: Error | null, connection: PgConnection) => void): void {
  const query = connection.query.bind(connection);
  connection.query = (...args: unknown[]) => {
    const callback = args.at(-1);
    if (typeof callback !== 'function') return query(...args);
    return query(...args.slice(0, -1), (error: Error | null, result: unknown) => {
      if (error?.message === 'Query read timeout') connection.__knex__disposed = error;
      callback(error, result);
    });
  };
  done(null, connection);
}

function wrap(knex: Knex, driver: Database['driver'], beforeClose?: () => Promise<void> | undefined): Database {
  return {
    knex,
    driver,
    singleConnection: driver === 'pglite',
    soleClient: driver === 'pglite',
    async ping() {
      await knex.raw('select 1');
    },
    async close() {
      await beforeClose?.();
      await knex.destroy();
    },
  };
}
