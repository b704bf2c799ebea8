/**
 * PGlite in a worker thread: the embedded database (PostgreSQL compiled to WebAssembly) runs every
 * query synchronously inside its WASM instance, so on the main thread each query would block every
 * request in flight for as long as it runs. Here it only blocks this thread. Messages are
 * `{ id, op: 'query' | 'close', sql?, params? }`; answers `{ id, result }` or `{ id, error }`.
 * The one session (and so knex's transactions) lives here, in order, as on the main thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import type { PGliteRequest, PGliteResponse, PGliteWorkerData } from './pglite-remote.js';

const port = parentPort!;
const { dataDir, buffersMb } = workerData as PGliteWorkerData;

const db = new PGlite({ dataDir, startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${buffersMb}MB`] });
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
    const r = await db.query(message.sql, message.params);
    port.postMessage({ id: message.id, result: { rows: r.rows as unknown[], fields: r.fields, affectedRows: r.affectedRows ?? 0 } } satisfies PGliteResponse);
  } catch (error) {
    port.postMessage({ id: message.id, error: serializeError(error) } satisfies PGliteResponse);
  }
});
