import test from 'ava';
import { randomUUID } from 'node:crypto';
import { createDatabase, migrateAll, type Database } from '../../../services/kit/index.js';
import { admitSpend, purgeSpendHolds, readSpend, releaseSpend, settleSpend, type SpendHold, type SpendKey } from '../../../services/llm-api/usage/budgets-store.js';
import { spendHoldExpiry, spendHolds, spendHoldsAdmittedIndex, spendSettledCount, spendTables } from '../../../services/llm-api/usage/migrations.js';

// The spend counter's admission rule, on the embedded database (the same SQL as PostgreSQL): a
// request joins others in flight once the period's requests have shown their cost, 0 included.
let db: Database;
test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [{ owner: 'usage_test', migrations: [spendTables, spendSettledCount, spendHolds, spendHoldsAdmittedIndex, spendHoldExpiry] }]);
});
test.after.always(async () => {
  await db?.close();
});

const limits = { cost: 10_000_000, tokens: null };
const T0 = Date.parse('2026-12-06T10:00:00Z');
const LEASE = 120_000;
/** How long after a lease a late settlement's retries may still come (budgets.ts passes its own). */
const SETTLE_WINDOW = 900_000;

/** One admission at `now` (the clock's milliseconds): its hold, or null when refused. */
async function admit(key: SpendKey, budget: { cost: number | null; tokens: number | null }, now = T0): Promise<SpendHold | null> {
  const holdId = randomUUID();
  const gen = await admitSpend(db.knex, key, budget, { holdId, now, leaseMs: LEASE, expiresMs: now + LEASE + SETTLE_WINDOW });
  return gen === null ? null : { ...key, holdId, gen };
}

test('requests that cost nothing (a model without a price) are admitted side by side under a cost budget', async (t) => {
  const key = { scope: 'user' as const, scopeId: 'user_free', periodStart: '2026-12-06' };
  const first = await admit(key, limits);
  t.truthy(first);
  t.is(await admit(key, limits), null, 'before any request has settled, one at a time');
  await settleSpend(db.knex, first!, { cost: 0, tokens: 15 });
  for (let i = 0; i < 5; i++) t.truthy(await admit(key, limits), `concurrent request ${i + 1}`);
  t.like(await readSpend(db.knex, 'user', 'user_free', '2026-12-06'), { in_flight: 5 });
});

test('paid requests still join only while all in flight fit', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_paid', periodStart: '2026-12-06' };
  const budget = { cost: 5000, tokens: null };
  const first = await admit(key, budget);
  await settleSpend(db.knex, first!, { cost: 1000, tokens: 10 }); // spent 1000, largest request 1000
  t.truthy(await admit(key, budget)); // 1000 + 1 × 1000
  t.truthy(await admit(key, budget));
  t.truthy(await admit(key, budget));
  t.truthy(await admit(key, budget)); // 1000 + 4 × 1000 = 5000
  t.is(await admit(key, budget), null); // 1000 + 5 × 1000 > 5000
});

test('an admission taken back (another budget refused the request) teaches nothing about cost', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_released', periodStart: '2026-12-06' };
  const first = await admit(key, limits);
  await releaseSpend(db.knex, first!);
  t.truthy(await admit(key, limits));
  t.is(await admit(key, limits), null, 'still one at a time: no request has settled');
  t.like(await readSpend(db.knex, 'key', 'key_released', '2026-12-06'), { in_flight: 1 });
});

test('a settlement applied twice (a retry after a commit whose answer was lost) counts once', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_twice', periodStart: '2026-12-06' };
  const held = await admit(key, limits);
  await settleSpend(db.knex, held!, { cost: 700, tokens: 30 });
  await settleSpend(db.knex, held!, { cost: 700, tokens: 30 });
  const counter = await readSpend(db.knex, 'key', 'key_twice', '2026-12-06');
  t.deepEqual([Number(counter.spent_micro_usd), Number(counter.tokens), Number(counter.settled), counter.in_flight], [700, 30, 1, 0]);
  t.is((await db.knex('llm_spend_holds').where({ scope_id: 'key_twice' })).length, 0, 'the hold is gone with its settlement');
});

test('the slot of a request whose process died is dropped once its lease has run out, not at the end of the period', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_crashed', periodStart: '2026-12-06' };
  t.truthy(await admit(key, limits, T0), 'taken, never given back (the process died)');
  t.is(await admit(key, limits, T0 + LEASE - 1), null, 'still held within its lease: one at a time');
  t.is(await admit(key, limits, T0 + LEASE + 1), null, 'still held just after one lease (it counts for at least one)');
  const later = await admit(key, limits, T0 + 3 * LEASE);
  t.truthy(later, 'admitted once the dead slot was dropped');
  t.like(await readSpend(db.knex, 'key', 'key_crashed', '2026-12-06'), { in_flight: 1, in_flight_prev: 0 });
});

test('a long request that settles after its slot was dropped still adds its cost, and frees no other request’s slot', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_slow', periodStart: '2026-12-06' };
  const slow = await admit(key, limits, T0);
  const next = await admit(key, limits, T0 + 3 * LEASE); // the slow one's slot dropped
  t.truthy(next);
  await settleSpend(db.knex, slow!, { cost: 2000, tokens: 40 });
  t.like(await readSpend(db.knex, 'key', 'key_slow', '2026-12-06'), { in_flight: 1 }, 'the slot of the request still running stays counted');
  t.is(Number((await readSpend(db.knex, 'key', 'key_slow', '2026-12-06')).spent_micro_usd), 2000);
  await settleSpend(db.knex, next!, { cost: 1000, tokens: 20 });
  t.like(await readSpend(db.knex, 'key', 'key_slow', '2026-12-06'), { in_flight: 0, in_flight_prev: 0 });
});

test('a request still running when its slot’s generation closes keeps its slot until it settles', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_rolled', periodStart: '2026-12-06' };
  const first = await admit(key, limits, T0);
  await settleSpend(db.knex, first!, { cost: 10, tokens: 1 }); // side by side from here on
  const running = await admit(key, limits, T0 + 1000);
  const after = await admit(key, limits, T0 + LEASE + 500); // a new generation: `running` is the previous one's
  t.true(after!.gen > running!.gen);
  t.like(await readSpend(db.knex, 'key', 'key_rolled', '2026-12-06'), { in_flight: 1, in_flight_prev: 1 });
  await settleSpend(db.knex, running!, { cost: 10, tokens: 1 });
  t.like(await readSpend(db.knex, 'key', 'key_rolled', '2026-12-06'), { in_flight: 1, in_flight_prev: 0 });
});

test('the hold rows of requests that never settled are deleted by a later admission, once no retry of theirs can come', async (t) => {
  const key = { scope: 'user' as const, scopeId: 'user_leftover', periodStart: '2026-12-06' };
  t.truthy(await admit(key, limits, T0));
  t.truthy(await admit(key, limits, T0 + 3 * LEASE)); // the first one's slot dropped, its row kept
  const held = async () => (await db.knex('llm_spend_holds').where({ scope_id: 'user_leftover' }).orderBy('admitted_ms')).map((row) => Number(row.admitted_ms));
  t.deepEqual(await held(), [T0, T0 + 3 * LEASE]);
  t.truthy(await admit(key, limits, T0 + 20 * LEASE));
  t.deepEqual(await held(), [T0 + 20 * LEASE]);
});

test('the purge deletes old holds of a counter nothing admits on any more (the embedded database too), and a settlement after it counts nothing', async (t) => {
  const key = { scope: 'key' as const, scopeId: 'key_purged', periodStart: '2026-12-05' };
  const dead = await admit(key, limits, T0 - 86_400_000);
  const recent = await admit({ ...key, scopeId: 'key_recent' }, limits, T0);
  t.truthy(dead && recent);
  t.is(await purgeSpendHolds(db.knex, T0, 1000), 1);
  t.is((await db.knex('llm_spend_holds').where({ scope_id: 'key_purged' })).length, 0);
  t.is((await db.knex('llm_spend_holds').where({ scope_id: 'key_recent' })).length, 1, 'a hold that may still settle stays');
  t.false(await settleSpend(db.knex, dead!, { cost: 500, tokens: 5 }), 'its hold is gone');
  t.is(Number((await readSpend(db.knex, 'key', 'key_purged', '2026-12-05')).spent_micro_usd), 0);
});

test.serial('a hold written without its expiry (by an earlier version) is kept a day after its admission', async (t) => {
  // Serial (before the others), and days before every other hold of this file: the purges here and
  // there delete nothing of each other's.
  const admitted = T0 - 10 * 86_400_000;
  await db.knex('llm_spend_holds').insert({ scope: 'key', scope_id: 'key_legacy', period_start: '2026-11-26', gen: 0, id: randomUUID(), admitted_ms: admitted });
  const kept = async () => (await db.knex('llm_spend_holds').where({ scope_id: 'key_legacy' })).length === 1;
  await purgeSpendHolds(db.knex, admitted + 3 * 3_600_000, 1000);
  t.true(await kept(), 'longer than any lease of that version');
  await purgeSpendHolds(db.knex, admitted + 86_400_000 + 1, 1000);
  t.false(await kept());
});
