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
 * main thread, ~2 µs a row), by step. The machine is idle here: under load the worker's CPU per
 * row read ~2.5× these (bench/README.md, "Thirtieth pass").
 *   --rows N (rows measured per variant, default 100 000)   --cap N (the log's row cap, default 100 000)
 *   --batch N (rows per batch, default 500)   --variants a,b (default: all)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Knex } from 'knex';
import { createDatabase, vacuumWhereDue, type ServedRequest } from '../services/kit/index.js';
import { requestLogTable } from '../services/llm-api/requests/migrations.js';
import { insertRequestLogBatch, pruneRequestLog } from '../services/llm-api/requests/store.js';
import type { UsageRecord } from '../services/llm-api/usage/recorder.js';
import { usageRollupTables, usageTables } from '../services/llm-api/usage/migrations.js';
import { insertUsageBatch } from '../services/llm-api/usage/store.js';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '100000' },
    cap: { type: 'string', default: '100000' },
    batch: { type: 'string', default: '500' },
    variants: { type: 'string' },
  },
});
const ROWS = Number(args.rows);
const CAP = Number(args.cap);
const BATCH = Number(args.batch);
for (const [name, value] of [['--rows', ROWS], ['--cap', CAP], ['--batch', BATCH]] as const) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} takes a whole number above 0`);
}

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

// Rows as a busy platform writes them: a few users and keys, one model, ids that never repeat.
let sequence = 0;
const requestId = () => `req_${(sequence++).toString(36).padStart(8, '0')}${Math.random().toString(36).slice(2, 14)}`;
function servedRequest(): ServedRequest {
  return {
    request_id: requestId(),
    method: 'POST',
    path: '/v1/chat/completions',
    route: '/v1/chat/completions',
    status: 200,
    duration_ms: Math.round(Math.random() * 3000) / 100,
    aborted: false,
    user_id: `usr_${sequence % 7}`,
    auth_method: 'api_key',
    api_key_id: `key_${sequence % 5}`,
    usage: { model: 'gpt-4o-mini', provider: 'prov_1', prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 },
    ended_at: new Date(),
  };
}
function usageRecord(): UsageRecord {
  return {
    request_id: requestId(),
    user_id: `usr_${sequence % 7}`,
    auth_method: 'api_key',
    api_key_id: `key_${sequence % 5}`,
    model: 'gpt-4o-mini',
    provider_id: 'prov_1',
    provider_model_id: 'pm_1',
    endpoint: 'chat.completions',
    stream: sequence % 2 === 0,
    prompt_tokens: 12,
    completion_tokens: 34,
    reasoning_tokens: 0,
    total_tokens: 46,
    cost_micro_usd: 21,
    latency_ms: 20,
    ttfb_ms: 20,
    attempts: 1,
    status: 200,
    outcome: 'ok',
    metadata: null,
    created_at: new Date(),
    project_id: null,
  };
}

const cpuMicros = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

async function measure(knex: Knex, variant: string): Promise<Record<string, number>> {
  const isLog = variant !== 'usage';
  const write = isLog
    ? (n: number) => insertRequestLogBatch(knex, Array.from({ length: n }, servedRequest))
    : (n: number) => insertUsageBatch(knex, Array.from({ length: n }, usageRecord));
  // Warm: the log at its cap (as after a day of traffic), the usage table at as many rows.
  for (let written = 0; written < CAP; written += BATCH) await write(BATCH);
  await knex.raw('vacuum (analyze)');
  const spent = { insert: 0, prune: 0, vacuum: 0 };
  let sincePrune = 0;
  for (let written = 0; written < ROWS; written += BATCH) {
    let start = cpuMicros();
    await write(BATCH);
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

console.log(`${ROWS} rows per variant in batches of ${BATCH}, the log at a cap of ${CAP} rows; process CPU per row, µs (every thread)\n`);
console.log('| table | insert | prune | vacuum | total |');
console.log('|---|---|---|---|---|');
for (const variant of chosen) {
  const dir = await mkdtemp(join(tmpdir(), 'bench-db-rows-'));
  const db = await createDatabase({ dataDir: dir, vacuumEveryMs: 0 });
  try {
    for (const migration of variant === 'usage' ? [usageTables, usageRollupTables] : [requestLogTable]) await migration.up(db.knex);
    for (const sql of VARIANTS[variant]!) await db.knex.raw(sql);
    const spent = await measure(db.knex, variant);
    const perRow = (micros: number) => (micros / ROWS).toFixed(1);
    console.log(`| ${variant} | ${perRow(spent.insert)} | ${perRow(spent.prune)} | ${perRow(spent.vacuum)} | **${perRow(spent.insert + spent.prune + spent.vacuum)}** |`);
  } finally {
    await db.close();
    await rm(dir, { recursive: true, force: true });
  }
}
