import test from 'ava';
import { EventEmitter } from 'node:events';
import { createDatabase, migrateAll, type Database } from '../../../services/kit/index.js';
import { usageCachedTokens, usageRollupTables, usageTables } from '../../../services/llm-api/usage/migrations.js';
import { usageCsv } from '../../../services/llm-api/usage/report.js';
import { usageRoutes } from '../../../services/llm-api/usage/routes.js';
import { selectUsage } from '../../../services/llm-api/usage/report-store.js';

// The CSV export reads the daily rollup a page (1000 groups) at a time while traffic keeps adding
// groups: each group must come out exactly once, whatever is added meanwhile.
let db: Database;
test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_export_test', migrations: [usageTables, usageRollupTables, usageCachedTokens] }]);
});
test.after.always(async () => {
  await db?.close();
});

const group = (day: string, user: string, key = '', model = 'm') => ({ day, user_id: user, api_key_id: key, model, provider_id: 'p', project_id: '', requests: 1, prompt_tokens: 1, completion_tokens: 1, reasoning_tokens: 0, cost_micro_usd: 1 });

async function insert(rows: ReturnType<typeof group>[]) {
  for (let i = 0; i < rows.length; i += 500) await db.knex('llm_usage_daily').insert(rows.slice(i, i + 500));
}

test.serial('groups added while the export runs (sorting before the page being read) neither repeat nor push others out', async (t) => {
  await insert(Array.from({ length: 2500 }, (_, u) => group('2026-11-20', `user_${String(u).padStart(6, '0')}`)));
  const lines = usageCsv({ knex: db.knex }, { from: '2026-11-20', to: '2026-11-20' }, ['user']);
  const out: string[] = [];
  for (let i = 0; i < 2; i++) out.push((await lines.next()).value as string); // header and the first group: page one is read
  // New traffic: 300 users whose ids sort before every one already exported.
  await insert(Array.from({ length: 300 }, (_, u) => group('2026-11-20', `user_0${String(u).padStart(5, '0')}a`)));
  for await (const line of lines) out.push(line);
  const ids = out.slice(1).map((l) => l.split(',')[0]);
  t.is(new Set(ids).size, ids.length, 'no group twice');
  const seen = new Set(ids);
  const missing = Array.from({ length: 2500 }, (_, u) => `user_${String(u).padStart(6, '0')}`).filter((id) => !seen.has(id));
  t.deepEqual(missing, [], 'every group that existed when the export started');
});

test.serial('paged by key over several columns, the export has exactly the rows of the unpaged report, in its order', async (t) => {
  const rows = [];
  for (const day of ['2026-10-01', '2026-10-02', '2026-10-03']) for (let k = 0; k < 500; k++) rows.push(group(day, 'user_multi', k % 7 === 0 ? '' : `key_${k}`, `m${k}`)); // one '' key group a day, of many models
  await insert(rows);
  const filter = { from: '2026-10-01', to: '2026-10-03' };
  const expected = (await selectUsage(db.knex, filter, ['day', 'key'], { limit: 10_000, offset: 0 })).map((r) => `${r.day},${r.api_key_id || ''}`);
  const out: string[] = [];
  for await (const line of usageCsv({ knex: db.knex }, filter, ['day', 'key'])) out.push(line);
  const got = out.slice(1).map((l) => l.split(',').slice(0, 2).join(','));
  t.true(expected.length > 1000, 'more than one page');
  t.deepEqual(got, expected);
});

test.serial('an export whose client goes away while it waits for the socket to drain ends', async (t) => {
  const exportRoute = usageRoutes({ usageReports: { knex: db.knex } }).find((r) => r.path === '/v1/admin/usage/export')!;
  let wrote!: () => void;
  const firstWrite = new Promise<void>((resolve) => (wrote = resolve));
  const writes: string[] = [];
  // A response whose socket is full: every write asks to wait for 'drain', which never comes.
  const res = Object.assign(new EventEmitter(), {
    status: () => res,
    setHeader: () => res,
    write: (line: string) => {
      writes.push(line);
      wrote();
      return false;
    },
    end: () => res,
  });
  const client = new AbortController();
  const handled = (exportRoute.handler as (call: unknown) => Promise<unknown>)({ query: { format: 'csv', group_by: ['user'], from: '2026-11-20', to: '2026-11-20' }, res, signal: client.signal });
  await firstWrite;
  client.abort(new Error('client closed'));
  await handled;
  t.is(writes.length, 1, 'nothing written after the client went away');
});
