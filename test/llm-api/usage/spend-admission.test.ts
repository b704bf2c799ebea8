import test from 'ava';
import { createDatabase, migrateAll, type Database } from '../../../services/kit/index.js';
import { admitSpend, readSpend, releaseSpend, settleSpend } from '../../../services/llm-api/usage/budgets-store.js';
import { spendSettledCount, spendTables } from '../../../services/llm-api/usage/migrations.js';

// The spend counter's admission rule, on the embedded database (the same SQL as PostgreSQL): a
// request joins others in flight once the period's requests have shown their cost, 0 included.
let db: Database;
test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_test', migrations: [spendTables, spendSettledCount] }]);
});
test.after.always(async () => {
  await db?.close();
});

const limits = { cost: 10_000_000, tokens: null };

test('requests that cost nothing (a model without a price) are admitted side by side under a cost budget', async (t) => {
  const key = { scope: 'user' as const, scopeId: 'user_free', periodStart: '2026-12-06' };
  t.true(await admitSpend(db.knex, key, limits));
  t.false(await admitSpend(db.knex, key, limits), 'before any request has settled, one at a time');
  await settleSpend(db.knex, key, { cost: 0, tokens: 15 });
  for (let i = 0; i < 5; i++) t.true(await admitSpend(db.knex, key, limits), `concurrent request ${i + 1}`);
  t.like(await readSpend(db.knex, 'user', 'user_free', '2026-12-06'), { in_flight: 5 });
});

test('paid requests still join only while all in flight fit', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_paid', periodStart: '2026-12-06' };
  const budget = { cost: 5000, tokens: null };
  t.true(await admitSpend(db.knex, key, budget));
  await settleSpend(db.knex, key, { cost: 1000, tokens: 10 }); // spent 1000, largest request 1000
  t.true(await admitSpend(db.knex, key, budget)); // 1000 + 1 × 1000
  t.true(await admitSpend(db.knex, key, budget));
  t.true(await admitSpend(db.knex, key, budget));
  t.true(await admitSpend(db.knex, key, budget)); // 1000 + 4 × 1000 = 5000
  t.false(await admitSpend(db.knex, key, budget)); // 1000 + 5 × 1000 > 5000
});

test('an admission taken back (another budget refused the request) teaches nothing about cost', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_released', periodStart: '2026-12-06' };
  t.true(await admitSpend(db.knex, key, limits));
  await releaseSpend(db.knex, key);
  t.true(await admitSpend(db.knex, key, limits));
  t.false(await admitSpend(db.knex, key, limits), 'still one at a time: no request has settled');
  t.like(await readSpend(db.knex, 'key', 'key_released', '2026-12-06'), { in_flight: 1 });
});
