/**
 * `node --import tsx bench/db-rows.ts`: what one row of llm-api's two per-request batches costs the
 * embedded database, in the steady state of a busy platform. The kit's PGlite (worker thread, data
 * directory on disk, as `npm start` runs it), the tables made by llm-api's own migrations, and the
 * platform's own statements: usage batches (`insertUsageBatch`: the raw rows and the daily rollup)
 * and recent-requests batches (`insertRequestLogBatch`), the log kept at its row cap by
 * `pruneRequestLog` every tenth of the cap and vacuumed when due (`vacuumWhereDue`), as the writer
 * and the embedded autovacuum do. Variants of the log's table show what its indexes and its write-
 * ahead log cost (each variant is SQL run after the migrations).
 * Prints process CPU per row (every thread: the worker's work, plus the batch's text built on the
 * main thread, ~2 µs a row), by step, and the median time one batch's statement takes (how long it
 * holds the worker). The machine is idle here: under load the worker's CPU per
 * row read ~2.5× these (bench/README.md, "Thirtieth pass").
 *   --rows N (rows measured per variant, default 100 000)   --cap N (the log's row cap, default 100 000)
 *   --batch N (rows per batch, default 500)   --variants a,b (default: all)
 *   --prepared N (statements the database keeps planned, as `DATABASE_EMBEDDED_PREPARED_STATEMENTS`;
 *   default: the platform's; 0: each statement parsed and planned on every call)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Knex } from 'knex';
import { requestLogMigrations, usageMigrations } from './lib/llm-tables.js';
import { median } from './lib/load.js';
import { servedRequest, usageRecord } from './lib/rows.js';
import { createDatabase, DEFAULT_EMBEDDED_PREPARED_STATEMENTS, vacuumWhereDue } from '../services/kit/index.js';
import { insertRequestLogBatch, pruneRequestLog } from '../services/llm-api/requests/store.js';
import { insertUsageBatch } from '../services/llm-api/usage/store.js';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '100000' },
    cap: { type: 'string', default: '100000' },
    batch: { type: 'string', default: '500' },
    variants: { type: 'string' },
    prepared: { type: 'string', default: String(DEFAULT_EMBEDDED_PREPARED_STATEMENTS) },
  },
});
const ROWS = Number(args.rows);
const CAP = Number(args.cap);
const BATCH = Number(args.batch);
const PREPARED = Number(args.prepared);
for (const [name, value] of [['--rows', ROWS], ['--cap', CAP], ['--batch', BATCH]] as const) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} takes a whole number above 0`);
}
if (!Number.isInteger(PREPARED) || PREPARED < 0) throw new Error('--prepared takes a whole number, 0 or more');

const LOG = 'llm_request_log';
/** The log's table as migrated, then with its secondary indexes or its write-ahead log taken away. */
const VARIANTS: Record<string, string[]> = {
  usage: [],
  log: [],
  'log without the request-id index': [`drop index ${LOG}_request_id_index`],
  'log, primary key only': ['request_id', 'user_id_id', 'api_key_id_id', 'created_at'].map((i) => `drop index ${LOG}_${i}_index`),
  'log unlogged': [`alter table ${LOG} set unlogged`],
};
const chosen = args.variants ? args.variants.split(',').map((v) => v.trim()) : Object.keys(VARIANTS);
for (const v of chosen) if (!(v in VARIANTS)) throw new Error(`unknown variant "${v}"; known: ${Object.keys(VARIANTS).join(', ')}`);

const cpuMicros = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

async function measure(knex: Knex, variant: string) {
  const isLog = variant !== 'usage';
  const write = isLog
    ? (n: number) => insertRequestLogBatch(knex, Array.from({ length: n }, servedRequest))
    : (n: number) => insertUsageBatch(knex, Array.from({ length: n }, usageRecord));
  // Warm: the log at its cap (as after a day of traffic), the usage table at as many rows.
  for (let written = 0; written < CAP; written += BATCH) await write(BATCH);
  await knex.raw('vacuum (analyze)');
  const spent = { insert: 0, prune: 0, vacuum: 0, batchMs: [] as number[] };
  let sincePrune = 0;
  for (let written = 0; written < ROWS; written += BATCH) {
    let start = cpuMicros();
    const began = performance.now();
    await write(BATCH);
    spent.batchMs.push(performance.now() - began);
    spent.insert += cpuMicros() - start;
    sincePrune += BATCH;
    if (sincePrune < CAP / 10) continue;
    sincePrune = 0;
    start = cpuMicros();
    if (isLog) await pruneRequestLog(knex, { before: new Date(Date.now() - 86_400_000), maxRows: CAP });
    spent.prune += cpuMicros() - start;
    start = cpuMicros();
    await vacuumWhereDue(knex);
    spent.vacuum += cpuMicros() - start;
  }
  return spent;
}

console.log(`${ROWS} rows per variant in batches of ${BATCH}, the log at a cap of ${CAP} rows, ${PREPARED} statements kept prepared; process CPU per row, µs (every thread)\n`);
console.log('| table | insert | prune | vacuum | total | one batch, median ms |');
console.log('|---|---|---|---|---|---|');
for (const variant of chosen) {
  const dir = await mkdtemp(join(tmpdir(), 'bench-db-rows-'));
  const db = await createDatabase({ dataDir: dir, vacuumEveryMs: 0, embeddedPreparedStatements: PREPARED });
  try {
    for (const migration of variant === 'usage' ? usageMigrations : requestLogMigrations) await migration.up(db.knex);
    for (const sql of VARIANTS[variant]!) await db.knex.raw(sql);
    const spent = await measure(db.knex, variant);
    const perRow = (micros: number) => (micros / ROWS).toFixed(1);
    const batchMs = median(spent.batchMs).toFixed(2);
    console.log(`| ${variant} | ${perRow(spent.insert)} | ${perRow(spent.prune)} | ${perRow(spent.vacuum)} | **${perRow(spent.insert + spent.prune + spent.vacuum)}** | ${batchMs} |`);
  } finally {
    await db.close();
    await rm(dir, { recursive: true, force: true });
  }
}
