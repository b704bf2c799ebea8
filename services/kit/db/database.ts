import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import knexFactory, { type Knex } from 'knex';
import pg from 'pg';
import ClientPgLite from 'knex-pglite';
import { startPGliteWorker } from './pglite-remote.js';

// node-pg returns int8 (count(*), bigserial) as strings; PGlite returns numbers. Make them agree.
pg.types.setTypeParser(20, (value) => Number(value));

export interface DatabaseOptions {
  /** `DATABASE_URL`: PostgreSQL through pg. Unset: PGlite under `dataDir`. */
  url?: string;
  dataDir: string;
  /** A schema to work in (created if missing); tests give each file its own. */
  schema?: string;
  poolMax?: number;
  /** PGlite only: keep the database in memory (tests of the embedded driver). */
  inMemory?: boolean;
}

export interface Database {
  knex: Knex;
  driver: 'postgres' | 'pglite';
  /**
   * PGlite has one connection: a query outside an open transaction waits for it. Code that must
   * not hold a transaction while other work runs (pollers, relays) checks this to stay short.
   */
  singleConnection: boolean;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export async function createDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.url) {
    const knex = knexFactory({
      client: 'pg',
      connection: options.url,
      pool: { min: 0, max: options.poolMax ?? 10 },
      searchPath: options.schema ? [options.schema] : undefined,
      acquireConnectionTimeout: 10_000,
    });
    if (options.schema) await knex.raw('create schema if not exists ??', [options.schema]);
    return wrap(knex, 'postgres');
  }
  let dir: string | undefined;
  if (!options.inMemory) {
    dir = resolve(options.dataDir, 'pglite');
    mkdirSync(dir, { recursive: true });
  }
  // PGlite runs each query synchronously in WebAssembly; in a worker thread it never blocks the
  // requests this thread serves. knex-pglite drives it through the same three members.
  const pglite = startPGliteWorker(dir);
  // Opening a data directory can take many seconds on a busy disk; wait for it here, so that the
  // acquire timeout below bounds waiting for the one connection, not PGlite's start.
  try {
    await pglite.waitReady;
  } catch (error) {
    await pglite.close();
    throw error;
  }
  const knex = knexFactory({
    client: ClientPgLite as unknown as typeof knexFactory.Client,
    connection: { pglite } as unknown as Knex.StaticConnectionConfig,
    searchPath: options.schema ? [options.schema] : undefined,
    // A waiting query fails instead of hanging forever if someone holds the one connection too long.
    acquireConnectionTimeout: 30_000,
  });
  if (options.schema) await knex.raw('create schema if not exists ??', [options.schema]);
  return wrap(knex, 'pglite');
}

function wrap(knex: Knex, driver: Database['driver']): Database {
  return {
    knex,
    driver,
    singleConnection: driver === 'pglite',
    async ping() {
      await knex.raw('select 1');
    },
    async close() {
      await knex.destroy();
    },
  };
}
