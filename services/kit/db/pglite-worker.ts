/**
 * PGlite in a worker thread: the embedded database (PostgreSQL compiled to WebAssembly) runs every
 * query synchronously inside its WASM instance, so on the main thread each query would block every
 * request in flight for as long as it runs. Here it only blocks this thread. Messages are
 * `{ id, op: 'query' | 'close', sql?, params? }`; answers `{ id, result }` or `{ id, error }`.
 * The one session (and so knex's transactions) lives here, in order, as on the main thread.
 * Repeated data statements run as named prepared statements (`pglite-prepared.ts`).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { preparedStatements } from './pglite-prepared.js';
import type { PGliteRequest, PGliteResponse, PGliteWorkerData } from './pglite-remote.js';

const port = parentPort!;
const { dataDir, buffersMb, preparedStatements: maxPrepared } = workerData as PGliteWorkerData;

/**
 * Two settings of PostgreSQL's own differ here, both for memory: PGlite's WebAssembly memory never
 * shrinks, so what PostgreSQL touches once stays resident for the life of the process.
 * - `shared_buffers`: the buffer pool is allocated and touched when the database starts, so its
 *   size is resident from the start (PostgreSQL's 128 MB default: ~120 MiB more than the 16 MiB
 *   that `DATABASE_EMBEDDED_BUFFERS_MB` defaults to).
 * - `default_statistics_target` 10 (PostgreSQL's default: 100): ANALYZE (the embedded autovacuum's)
 *   reads a sample of 300 × this many rows of a table into memory. At 100 that is 30 000 rows, whose
 *   high-water mark rose with the tables for the first tens of minutes of a platform's life
 *   (~1.3 MiB a minute at 40 requests a second). At 10 the sample is 3 000 rows. The planner gets
 *   10 most-common values and histogram buckets per column, which this schema's keyed lookups and
 *   time ranges need no more than.
 */
const db = new PGlite({
  dataDir,
  startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${buffersMb}MB`, '-c', 'default_statistics_target=10'],
});
const statements = maxPrepared > 0 ? preparedStatements(db, { maxStatements: maxPrepared }) : db;
db.waitReady.then(
  () => port.postMessage({ id: 0, result: { rows: [], fields: [], affectedRows: 0 } } satisfies PGliteResponse),
  (error: Error) => port.postMessage({ id: 0, error: serializeError(error) } satisfies PGliteResponse),
);

/** A database error keeps its fields (code, detail, constraint…) across the thread boundary. */
function serializeError(error: unknown): Record<string, unknown> {
  const e = error as Error & Record<string, unknown>;
  const out: Record<string, unknown> = { name: e?.name ?? 'Error', message: e?.message ?? String(error) };
  for (const [key, value] of Object.entries(e ?? {})) {
    if (value === undefined || typeof value === 'function' || (typeof value === 'object' && value !== null)) continue;
    out[key] = value;
  }
  return out;
}

port.on('message', async (message: PGliteRequest) => {
  try {
    if (message.op === 'close') {
      // The main thread terminates this worker once the data directory is flushed and closed.
      await db.close();
      port.postMessage({ id: message.id, result: { rows: [], fields: [], affectedRows: 0 } } satisfies PGliteResponse);
      return;
    }
    const r = await statements.query(message.sql, message.params);
    port.postMessage({ id: message.id, result: { rows: r.rows as unknown[], fields: r.fields, affectedRows: r.affectedRows ?? 0 } } satisfies PGliteResponse);
  } catch (error) {
    port.postMessage({ id: message.id, error: serializeError(error) } satisfies PGliteResponse);
  }
});
