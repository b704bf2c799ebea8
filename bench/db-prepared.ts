/**
 * `node --import tsx bench/db-prepared.ts`: what keeping repeated statements prepared saves the
 * embedded database on llm-api's two per-request batches (usage, recent-requests log). Two kit
 * databases side by side in this process, one with `DATABASE_EMBEDDED_PREPARED_STATEMENTS` 0 (each
 * statement parsed and planned on every call, as before) and one with the default, each in its own
 * worker thread with llm-api's migrations; the platform's own batch statements, in rounds that
 * alternate which database goes first. Prints, per batch size, the median time a batch takes (how
 * long it holds the worker) and the CPU the worker threads spent per batch (/proc, per thread), for
 * both, and their ratio.
 *   --sizes 25,100,500 (rows per batch)   --rounds N (8)   --batches N (batches per side and round, 40)
 */
import { parseArgs } from 'node:util';
import { createDatabase, DEFAULT_EMBEDDED_PREPARED_STATEMENTS, type Database } from '../services/kit/index.js';
import { insertRequestLogBatch } from '../services/llm-api/requests/store.js';
import { insertUsageBatch } from '../services/llm-api/usage/store.js';
import { requestLogMigrations, usageMigrations } from './lib/llm-tables.js';
import { median } from './lib/load.js';
import { threadCpuMs } from './lib/procs.js';
import { servedRequest, usageRecord } from './lib/rows.js';

const { values: args } = parseArgs({
  options: {
    sizes: { type: 'string', default: '25,100,500' },
    rounds: { type: 'string', default: '8' },
    batches: { type: 'string', default: '40' },
  },
});
const SIZES = args.sizes.split(',').map(Number);
const ROUNDS = Number(args.rounds);
const BATCHES = Number(args.batches);
for (const value of [...SIZES, ROUNDS, BATCHES]) if (!Number.isInteger(value) || value < 1) throw new Error('--sizes, --rounds and --batches take whole numbers above 0');

interface Side {
  label: string;
  db: Database;
  /** The threads this database started: its worker (and what the worker starts). */
  threads: string[];
}

async function open(label: string, prepared: number): Promise<Side> {
  const before = new Set(Object.keys(await threadCpuMs(process.pid)));
  const db = await createDatabase({ dataDir: '.', inMemory: true, vacuumEveryMs: 0, embeddedPreparedStatements: prepared });
  const threads = Object.keys(await threadCpuMs(process.pid)).filter((tid) => !before.has(tid));
  for (const migration of [...usageMigrations, ...requestLogMigrations]) await migration.up(db.knex);
  return { label, db, threads };
}

const workerCpuMs = async (side: Side) => {
  const spent = await threadCpuMs(process.pid);
  return side.threads.reduce((sum, tid) => sum + (spent[tid] ?? 0), 0);
};

const statements = {
  usage: (db: Database, rows: number) => insertUsageBatch(db.knex, Array.from({ length: rows }, usageRecord)),
  log: (db: Database, rows: number) => insertRequestLogBatch(db.knex, Array.from({ length: rows }, servedRequest)),
};

const sides = [await open('planned each call', 0), await open(`prepared (${DEFAULT_EMBEDDED_PREPARED_STATEMENTS})`, DEFAULT_EMBEDDED_PREPARED_STATEMENTS)];
console.log(`${ROUNDS} rounds × ${BATCHES} batches per side, alternating; median over batches (time) and over rounds (worker CPU)\n`);
console.log('| statement | rows | planned each call: ms a batch | CPU ms a batch | prepared: ms a batch | CPU ms a batch | CPU prepared / planned |');
console.log('|---|---|---|---|---|---|---|');
try {
  for (const [name, write] of Object.entries(statements)) {
    for (const rows of SIZES) {
      const times = sides.map(() => [] as number[]);
      const cpu = sides.map(() => [] as number[]);
      for (const side of sides) for (let i = 0; i < 5; i++) await write(side.db, rows); // warm: past PostgreSQL's five custom plans
      for (let round = 0; round < ROUNDS; round++) {
        for (const k of round % 2 ? [1, 0] : [0, 1]) {
          const side = sides[k]!;
          const cpuBefore = await workerCpuMs(side);
          for (let b = 0; b < BATCHES; b++) {
            const began = performance.now();
            await write(side.db, rows);
            times[k]!.push(performance.now() - began);
          }
          cpu[k]!.push((await workerCpuMs(side)) - cpuBefore);
        }
      }
      const ms = times.map((t) => median(t).toFixed(2));
      const cpuPerBatch = cpu.map((c) => median(c) / BATCHES);
      console.log(`| ${name} | ${rows} | ${ms[0]} | ${cpuPerBatch[0]!.toFixed(2)} | ${ms[1]} | ${cpuPerBatch[1]!.toFixed(2)} | ${(cpuPerBatch[1]! / cpuPerBatch[0]!).toFixed(2)} |`);
    }
  }
} finally {
  for (const side of sides) await side.db.close();
}
