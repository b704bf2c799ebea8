import { randomBytes } from 'node:crypto';
import test from 'ava';
import type { Knex } from 'knex';
import { createMediaStore, newMediaId, type MediaStore } from '../../domains/media/index.js';
import { newId } from '../../services/kit/index.js';
import { mediaApiService } from '../../services/media-api/service.js';
import { openTestRuntime } from '../helpers/env.js';
import { analyzeOwnTables, assertIndexBacked, batchInsert as insertRows, explainSql, type PlanNode } from '../helpers/query-plans.js';

// The media sweep's queries stay index-backed at volume: 20,000 media over 400 users and 20,000
// stored objects, bulk-inserted, then ANALYZE (this file's schema only). The SQL each store method
// of the sweep really runs is captured as it runs, then EXPLAINed: no sequential scan, and each
// table read through the index meant for it (serial: each test captures what its own call sends).
// No timing is measured.
const USERS = 400;
const MEDIA_PER_USER = 50; // 20,000 media, one object each
const DAY = 86_400;

let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let knex: Knex;
let store: MediaStore;
const now = Math.floor(Date.now() / 1000);

const batchInsert = (table: string, rows: Record<string, unknown>[]) => insertRows(knex, table, rows);

test.before(async () => {
  runtime = await openTestRuntime({ migrations: mediaApiService.migrations, bus: 'pg' });
  knex = runtime.db.knex;
  store = createMediaStore(knex);
  const users = Array.from({ length: USERS }, () => newId('user'));
  await batchInsert('users', users.map((id) => ({ id, subject: id })));
  const media: Record<string, unknown>[] = [];
  const objects: Record<string, unknown>[] = [];
  let n = 0;
  for (const userId of users) {
    for (let i = 0; i < MEDIA_PER_USER; i++, n++) {
      const sha256 = randomBytes(32).toString('hex');
      // Most media are ready and settled; a few reservations are open, completing or merged, and a
      // handful of ready ones still name their staging object (a finalisation stopped half-way).
      const kind = n % 200;
      const state = kind === 0 ? 'pending' : kind === 1 ? 'completing' : kind === 2 ? 'merged' : 'ready';
      const open = state !== 'ready';
      media.push({
        id: newMediaId(runtime.clock),
        user_id: userId,
        state,
        sha256: state === 'pending' ? null : sha256,
        mime_type: 'image/png',
        bytes: 1000,
        width: 10,
        height: 10,
        upload_key: open || kind === 3 ? `uploads/${n}` : null,
        created_at: now - (n % 30) * DAY,
        expires_at: open ? now + 3600 : null,
      });
      // Objects are touched when written; those past the collector's grace (a day here) are the few
      // written before the window this data set spans.
      objects.push({ sha256, bytes: 1000, mime_type: 'image/png', touched_at: new Date((now - (n % 1000 === 0 ? 2 * DAY : (n % 80) * 1000)) * 1000) });
    }
  }
  await batchInsert('media', media);
  await batchInsert('media_objects', objects);
  await batchInsert('media_staging', Array.from({ length: 2000 }, (_, i) => ({ upload_key: `uploads/${i * 7}`, delete_after: now + (i % 100 === 0 ? -60 : 3600) })));
  await analyzeOwnTables(knex);
});
test.after.always(() => runtime?.dispose());

/** The plan of every query `run` sends (each store method of the sweep sends one). */
async function plansOf(run: () => Promise<unknown>): Promise<PlanNode[][]> {
  const sent: Array<{ sql: string; bindings: readonly unknown[] }> = [];
  const listener = (query: { sql: string; bindings?: readonly unknown[] }) => sent.push({ sql: query.sql, bindings: query.bindings ?? [] });
  knex.on('query', listener);
  try {
    await run();
  } finally {
    knex.removeListener('query', listener);
  }
  const plans: PlanNode[][] = [];
  for (const { sql, bindings } of sent) plans.push(await explainSql(knex, sql, bindings));
  return plans;
}

async function assertSweepIndexBacked(t: import('ava').ExecutionContext, run: () => Promise<unknown>, tables: Record<string, string[]>) {
  const plans = await plansOf(run);
  t.is(plans.length, 1, 'one query');
  assertIndexBacked(t, plans[0]!, tables);
}

test.serial('the data set is as large as claimed', async (t) => {
  const count = async (table: string) => Number((await knex(table).count<{ c: number }[]>({ c: '*' }))[0]!.c);
  t.is(await count('media'), USERS * MEDIA_PER_USER);
  t.is(await count('media_objects'), USERS * MEDIA_PER_USER);
});

test.serial('unreferenced objects past the grace are found through the touched_at index', async (t) => {
  await assertSweepIndexBacked(t, () => store.unreferencedObjects(new Date((now - DAY) * 1000), 500), { media_objects: ['media_objects_touched'], media: ['media_sha'] });
});

test.serial('ready media still naming a staging object are found through their partial index', async (t) => {
  await assertSweepIndexBacked(t, () => store.readyWithUploadKey(100), { media: ['media_ready_upload_key'] });
});

test.serial('due staging keys are checked against open reservations through the reservations index', async (t) => {
  await assertSweepIndexBacked(t, () => store.dueStaging(now, 500), { media_staging: ['media_staging_due'], media: ['media_reservations'] });
});

test.serial('expired reservations and stuck completions read the reservations index', async (t) => {
  await assertSweepIndexBacked(t, () => store.expiredReservations(now, 500), { media: ['media_reservations'] });
  await assertSweepIndexBacked(t, () => store.stuckCompleting(now, 100), { media: ['media_reservations'] });
});
