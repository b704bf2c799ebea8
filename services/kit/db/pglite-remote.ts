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

export function startPGliteWorker(dataDir: string | undefined): RemotePGlite {
  const worker = spawnWorker({ dataDir });
  const pending = new Map<number, { resolve(value: any): void; reject(error: Error): void }>();
  let nextId = 1;
  let exited: Error | undefined;

  const toError = (fields: Record<string, unknown>) => Object.assign(new Error(String(fields.message)), fields);
  const ready = new Promise<void>((resolve, reject) => pending.set(0, { resolve: () => resolve(), reject }));
  // Unhandled until someone waits on it: an init failure surfaces on the first query instead.
  ready.catch(() => {});

  worker.on('message', (message: PGliteResponse) => {
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    if ('error' in message) waiter.reject(toError(message.error));
    else waiter.resolve(message.result);
  });
  const failAll = (error: Error) => {
    exited = error;
    for (const waiter of pending.values()) waiter.reject(error);
    pending.clear();
  };
  worker.on('error', (error) => failAll(error));
  worker.on('exit', (code) => failAll(new Error(`PGlite worker exited (code ${code})`)));

  const send = (request: Request) =>
    new Promise<any>((resolve, reject) => {
      if (exited) return reject(exited);
      const id = nextId++;
      pending.set(id, { resolve, reject });
      worker.postMessage({ ...request, id });
    });

  return {
    waitReady: ready,
    query: (sql, params) => send({ op: 'query', sql, params }),
    async close() {
      if (exited) return;
      await send({ op: 'close' }).catch(() => {});
      await worker.terminate();
    },
  };
}

/**
 * Compiled: the .js next to this file. Run from source under tsx (tests, `node --import tsx`):
 * the .ts, loaded through tsx registered inside the worker (workers do not inherit `--import` hooks).
 */
function spawnWorker(workerData: unknown): Worker {
  const self = import.meta.url;
  if (!self.endsWith('.ts')) return new Worker(new URL('./pglite-worker.js', self), { workerData });
  const entry = new URL('./pglite-worker.ts', self).href;
  const tsx = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(code, { eval: true, workerData });
}
