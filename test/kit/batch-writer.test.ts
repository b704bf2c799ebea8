import test from 'ava';
import { createBatchWriter, createLogger } from '../../services/kit/index.js';

// The kit's batch writer (usage records, the recent-requests log): batches of at most batchSize,
// a failed batch kept in order and written on the next flush, memory bounded by dropping the oldest,
// and everything left written on stop.
const silent = createLogger({ level: 'silent', name: 'test' });

function writer(options: { failures?: number; maxQueued?: number; afterWrite?: () => Promise<unknown> } = {}) {
  const batches: number[][] = [];
  let failures = options.failures ?? 0;
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => {
      if (failures-- > 0) throw new Error('database down');
      batches.push(batch);
    },
    afterWrite: options.afterWrite,
    flushMs: 3_600_000, // no timer flush during the test: flushes are explicit
    batchSize: 3,
    maxQueued: options.maxQueued ?? 1000,
    logger: silent,
  });
  return { w, batches };
}

test('flush writes in batches of batchSize, in order', async (t) => {
  const { w, batches } = writer();
  for (let i = 1; i <= 2; i++) w.push(i);
  t.is(w.pending(), 2);
  await w.flush();
  t.deepEqual(batches, [[1, 2]]);
  for (let i = 3; i <= 9; i++) w.push(i); // the third push of a batch starts a flush by itself
  await w.stop();
  t.deepEqual(batches.flat(), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  t.true(batches.every((b) => b.length <= 3));
});

test('a failed batch is kept and written first on the next flush; afterWrite runs after each written batch', async (t) => {
  let after = 0;
  const { w, batches } = writer({ failures: 1, afterWrite: async () => void after++ });
  w.push(1);
  w.push(2);
  await w.flush();
  t.deepEqual(batches, []);
  t.is(w.pending(), 2);
  t.is(after, 0);
  w.push(3);
  await w.flush();
  t.deepEqual(batches, [[1, 2, 3]]);
  t.is(after, 1);
  await w.stop();
});

test('past maxQueued the oldest records are dropped', async (t) => {
  const { w, batches } = writer({ failures: 100, maxQueued: 2 });
  w.push(1);
  w.push(2);
  w.push(3);
  t.is(w.pending(), 2);
  await w.flush(); // fails; the records stay
  t.deepEqual(batches, []);
  t.is(w.pending(), 2);
});

/** A writer whose first write holds until `release()`; `started` settles when it began. Batches are recorded as handed over. */
function gated() {
  const batches: number[][] = [];
  let release!: () => void;
  let writing!: () => void;
  const started = new Promise<void>((resolve) => (writing = resolve));
  const held = new Promise<void>((resolve) => (release = resolve));
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => {
      batches.push(batch);
      if (batches.length === 1) {
        writing();
        await held;
      }
    },
    flushMs: 3_600_000,
    batchSize: 3,
    maxQueued: 1000,
    logger: silent,
  });
  return { w, batches, started, release };
}

test('a flush writes what was queued when it started; records arriving during its writes wait for the next one', async (t) => {
  const { w, batches, started, release } = gated();
  w.push(1);
  w.push(2);
  const first = w.flush();
  await started; // [1, 2] is being written
  w.push(3);
  w.push(4);
  release();
  await first;
  t.deepEqual(batches, [[1, 2]], 'the records pushed during the write were not written in a batch of their own');
  t.is(w.pending(), 2);
  await w.flush();
  t.deepEqual(batches, [[1, 2], [3, 4]]);
  await w.stop();
});

// A record the database refuses (a value its column cannot take) must not block every later record.
function picky(options: { unavailable?: number } = {}) {
  const batches: number[][] = [];
  let unavailable = options.unavailable ?? 0;
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => {
      if (unavailable-- > 0) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      if (batch.some((n) => !Number.isInteger(n))) throw Object.assign(new Error('invalid input syntax for type integer: "12.5"'), { code: '22P02' });
      batches.push(batch);
    },
    flushMs: 3_600_000,
    batchSize: 3,
    maxQueued: 1000,
    logger: silent,
  });
  return { w, batches };
}

test('a batch the database keeps refusing is written record by record: only the bad record is dropped, later ones are written', async (t) => {
  const { w, batches } = picky();
  w.push(1);
  w.push(12.5);
  await w.flush(); // refused: kept and retried, as any failed batch
  t.is(w.pending(), 2);
  await w.flush();
  t.is(w.pending(), 2);
  await w.flush(); // refused a third time: written one record at a time
  t.deepEqual(batches, [[1]]);
  t.is(w.pending(), 0);
  for (let i = 2; i <= 4; i++) w.push(i);
  await w.flush();
  t.deepEqual(batches.flat(), [1, 2, 3, 4]);
  await w.stop();
});

test('while the database is unavailable nothing is dropped, however often the batch fails', async (t) => {
  const { w, batches } = picky({ unavailable: 6 });
  w.push(1);
  w.push(2);
  for (let i = 0; i < 6; i++) await w.flush();
  t.deepEqual(batches, []);
  t.is(w.pending(), 2);
  await w.flush();
  t.deepEqual(batches, [[1, 2]]);
  await w.stop();
});

test('the database going away while a refused batch is written record by record keeps the rest', async (t) => {
  const batches: number[][] = [];
  let calls = 0;
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => {
      calls++;
      if (calls <= 3) throw new Error('value out of range for type integer'); // the batch, three times
      if (calls === 5) throw Object.assign(new Error('Connection terminated unexpectedly'), {}); // the second single record
      batches.push(batch);
    },
    flushMs: 3_600_000,
    batchSize: 4, // three pushes start no flush of their own
    maxQueued: 1000,
    logger: silent,
  });
  w.push(1);
  w.push(2);
  w.push(3);
  for (let i = 0; i < 3; i++) await w.flush();
  t.deepEqual(batches, [[1]]);
  t.is(w.pending(), 2, 'records 2 and 3 kept, not dropped');
  await w.flush();
  t.deepEqual(batches.flat(), [1, 2, 3]);
  await w.stop();
});

/** A writer whose database is away until `up()`: every write attempt is counted. */
function outage(batchSize: number) {
  const state = { calls: 0, down: true, batches: [] as number[][] };
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => {
      state.calls++;
      if (state.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      state.batches.push(batch);
    },
    flushMs: 3_600_000,
    batchSize,
    maxQueued: 1000,
    logger: silent,
  });
  return { w, state, up: () => (state.down = false) };
}

test('while writes fail, a full batch starts no write of its own: the next tick (or flush) retries, not every push', async (t) => {
  const { w, state, up } = outage(3);
  const batches = state.batches;
  for (let i = 1; i <= 3; i++) w.push(i); // a full batch: its own flush, which fails
  await w.flush(); // waits for it, and fails again
  t.is(state.calls, 2);
  for (let i = 4; i <= 9; i++) w.push(i); // more full batches while the database is away
  await w.flush();
  t.is(state.calls, 3, 'only the explicit flush wrote');
  t.is(w.pending(), 9);
  up();
  await w.flush();
  t.deepEqual(batches.flat(), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  for (let i = 10; i <= 12; i++) w.push(i); // writing again: a full batch flushes by itself
  await w.stop();
  t.deepEqual(batches.flat().slice(9), [10, 11, 12]);
});

test('stop waits for a flush already writing (its batch is off the queue) before it returns', async (t) => {
  const { w, batches, started, release } = gated();
  w.push(1);
  w.requestFlush();
  await started;
  t.is(w.pending(), 0, 'the batch being written is off the queue');
  let stopped = false;
  const stopping = w.stop().then(() => (stopped = true));
  await Promise.resolve();
  await Promise.resolve();
  t.false(stopped, 'stop did not return while the write was in flight');
  release();
  await stopping;
  t.deepEqual(batches, [[1]]);
});

test('requestFlush writes now, but not while writes fail: the tick or an explicit flush retries', async (t) => {
  const { w, state, up } = outage(100);
  w.push(1);
  await w.flush(); // fails: the writer is failing
  t.is(state.calls, 1);
  w.push(2);
  w.requestFlush();
  await w.flush(); // only this one writes
  t.is(state.calls, 2, 'the requested flush started no write of its own while writes fail');
  up();
  await w.flush();
  w.push(3);
  w.requestFlush();
  await w.flush(); // chained after the requested one, which wrote [3]
  t.deepEqual(state.batches, [[1, 2], [3]]);
  t.is(state.calls, 4);
  await w.stop();
});

test('the tick writes what was pushed without an explicit flush', async (t) => {
  let written!: (batch: number[]) => void;
  const firstWrite = new Promise<number[]>((resolve) => (written = resolve));
  const w = createBatchWriter<number>({
    name: 'test',
    write: async (batch) => written(batch),
    flushMs: 1,
    batchSize: 100,
    maxQueued: 1000,
    logger: silent,
  });
  w.push(7);
  t.deepEqual(await firstWrite, [7]);
  await w.stop();
});

test('stopRetryMs: stop keeps retrying past its three quick tries while the database is away; without it, what is left is dropped', async (t) => {
  const make = (stopRetryMs?: number) => {
    const state = { calls: 0, batches: [] as number[][] };
    const w = createBatchWriter<number>({
      name: 'test',
      write: async (batch) => {
        // Away for the first five writes (a restart during a deploy), then back.
        if (++state.calls <= 5) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
        state.batches.push(batch);
      },
      flushMs: 3_600_000,
      batchSize: 10,
      maxQueued: 1000,
      logger: silent,
      stopRetryMs,
    });
    w.push(1);
    w.push(2);
    return { w, state };
  };
  const patient = make(10_000);
  await patient.w.stop();
  t.deepEqual(patient.state.batches, [[1, 2]]);
  t.is(patient.state.calls, 6);
  const quick = make();
  await quick.w.stop();
  t.deepEqual(quick.state.batches, [], 'three tries, all while the database was away');
  t.is(quick.state.calls, 3);
  t.is(quick.w.pending(), 2);
});
