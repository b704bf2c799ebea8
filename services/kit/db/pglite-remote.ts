import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

type Request = { op: 'query'; sql: string; params?: unknown[] } | { op: 'close' };
export type PGliteRequest = Request & { id: number };
export type PGliteResponse =
  | { id: number; result: { rows: unknown[]; fields: Array<{ name: string; dataTypeID: number }>; affectedRows: number } }
  | { id: number; error: Record<string, unknown> };

/**
 * The main-thread side of a PGlite running in a worker thread (`pglite-worker.ts`): the three members
 * knex-pglite uses (`waitReady`, `query`, `close`), answered over the worker's message port. Rows
 * cross the boundary by structured clone, which keeps Dates, byte arrays and numbers as PGlite made them.
 */
export interface RemotePGlite {
  waitReady: Promise<void>;
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[]; fields: unknown[]; affectedRows: number }>;
  close(): Promise<void>;
}

/** The embedded database's buffer pool when nothing sets it (`DATABASE_EMBEDDED_BUFFERS_MB`), in MiB. */
export const DEFAULT_EMBEDDED_BUFFERS_MB = 16;

/** How many repeated statements the embedded database keeps planned when nothing sets it (`DATABASE_EMBEDDED_PREPARED_STATEMENTS`). */
export const DEFAULT_EMBEDDED_PREPARED_STATEMENTS = 128;

/**
 * What the worker opens: the data directory (unset: in memory), PostgreSQL's buffer pool in MiB,
 * and how many repeated statements it keeps prepared (0: none).
 */
export interface PGliteWorkerData {
  dataDir: string | undefined;
  buffersMb: number;
  preparedStatements: number;
}

export function startPGliteWorker(dataDir: string | undefined, options: Omit<PGliteWorkerData, 'dataDir'>): RemotePGlite {
  const workerData: PGliteWorkerData = { dataDir, ...options };
  const pending = new Map<number, { resolve(value: any): void; reject(error: Error): void }>();
  let nextId = 1;
  let exited: Error | undefined;
  let worker: Worker | undefined;

  const failAll = (error: Error) => {
    exited = error;
    for (const waiter of pending.values()) waiter.reject(error);
    pending.clear();
  };
  const ready = initialiseIfNew(workerData).then(
    () =>
      new Promise<void>((resolve, reject) => {
        pending.set(0, { resolve: () => resolve(), reject });
        worker = spawnWorker(workerData);
        worker.on('message', (message: PGliteResponse) => {
          const waiter = pending.get(message.id);
          if (!waiter) return;
          pending.delete(message.id);
          if ('error' in message) waiter.reject(toError(message.error));
          else waiter.resolve(message.result);
        });
        worker.on('error', (error) => failAll(error));
        worker.on('exit', (code) => failAll(new Error(`PGlite worker exited (code ${code})`)));
      }),
    (error: Error) => {
      exited = error;
      throw error;
    },
  );
  // Unhandled until someone waits on it: an init failure surfaces on the first query instead.
  ready.catch(() => {});

  const send = (request: Request) =>
    new Promise<any>((resolve, reject) => {
      if (exited) return reject(exited);
      if (!worker) return reject(new Error('PGlite is not open yet (wait for waitReady)'));
      const id = nextId++;
      pending.set(id, { resolve, reject });
      worker.postMessage({ ...request, id });
    });

  return {
    waitReady: ready,
    query: (sql, params) => send({ op: 'query', sql, params }),
    async close() {
      if (exited || !worker) return;
      await send({ op: 'close' }).catch(() => {});
      await worker.terminate();
    },
  };
}

const toError = (fields: Record<string, unknown>) => Object.assign(new Error(String(fields.message)), fields);

/**
 * Initialising a new data directory (initdb) grows PGlite's WebAssembly memory to ~630 MiB plus
 * ~225 MiB of buffers, and a WebAssembly instance never gives memory back: a platform started on an
 * empty directory stayed at ~900 MiB resident, against ~450 MiB when it opened one already
 * initialised. So a new directory is initialised by a worker of its own, which closes it and exits,
 * its memory with it, before the worker that serves opens the directory.
 */
async function initialiseIfNew(workerData: PGliteWorkerData): Promise<void> {
  const { dataDir } = workerData;
  if (dataDir === undefined || existsSync(join(dataDir, 'PG_VERSION'))) return;
  const init = spawnWorker(workerData);
  const answer = (id: number) =>
    new Promise<void>((resolve, reject) => {
      init.on('message', (message: PGliteResponse) => {
        if (message.id !== id) return;
        if ('error' in message) reject(toError(message.error));
        else resolve();
      });
      init.once('error', reject);
      init.once('exit', (code) => reject(new Error(`PGlite worker exited (code ${code}) while initialising ${dataDir}`)));
    });
  try {
    await answer(0);
    const closed = answer(1);
    init.postMessage({ id: 1, op: 'close' } satisfies PGliteRequest);
    await closed;
  } finally {
    await init.terminate();
  }
}

/**
 * Compiled: the .js next to this file. Run from source under tsx (tests, `node --import tsx`):
 * the .ts, loaded through tsx registered inside the worker (workers do not inherit `--import` hooks).
 */
function spawnWorker(workerData: PGliteWorkerData): Worker {
  const self = import.meta.url;
  if (!self.endsWith('.ts')) return new Worker(new URL('./pglite-worker.js', self), { workerData });
  const entry = new URL('./pglite-worker.ts', self).href;
  const tsx = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(code, { eval: true, workerData });
}
