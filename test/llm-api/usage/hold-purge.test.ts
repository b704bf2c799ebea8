import test from 'ava';
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { ManualClock, type Principal, type ServiceContext } from '../../../services/kit/index.js';
import type { LlmApiDeps } from '../../../services/llm-api/deps.js';
import { admitSpend, purgeSpendCountersSql, purgeSpendHoldsSql, readSpend, type SpendKey } from '../../../services/llm-api/usage/budgets-store.js';
import { admitRequest, purgeStaleHolds, startHoldPurge, writeSpendLimits, type SpendDeps } from '../../../services/llm-api/usage/budgets.js';
import { usageResource } from '../../../services/llm-api/usage/index.js';
import { spendCountersPeriodIndex, spendHoldExpiry, spendHolds, spendHoldsAdmittedIndex, spendSettledCount, spendTables } from '../../../services/llm-api/usage/migrations.js';
import { openTestRuntime } from '../../helpers/env.js';
import { analyzeOwnTables, assertIndexBacked, batchInsert, explainSql } from '../../helpers/query-plans.js';
import { waitFor } from '../../helpers/wait.js';

// Holds of requests that never settled (their process died) on counters no admission visits any
// more (a period that is over) are deleted by a periodic purge once their lease and the settle retry
// window are over (by the expiry the admitting process wrote in the hold); a settlement that comes
// after that is not counted, and is logged. The purge reads the holds through their expiry's index. Real PostgreSQL (own schema): the plans are its.
let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let knex: Knex;
test.before(async () => {
  runtime = await openTestRuntime({ migrations: [{ owner: 'hold_purge_test', migrations: [spendTables, spendSettledCount, spendHolds, spendHoldsAdmittedIndex, spendHoldExpiry, spendCountersPeriodIndex] }], bus: 'pg' });
  knex = runtime.db.knex;
});
test.after.always(async () => {
  await runtime?.dispose();
});

const MAX_REQUEST_MS = 60_000;
/** What budgets.ts holds a slot for (the longest request and a minute), and how long settle retries may come after. */
const LEASE = MAX_REQUEST_MS + 60_000;
const SETTLE_WINDOW = 15 * 60_000;
const DAY1 = Date.parse('2026-12-06T23:59:00Z');

const holdsOf = async (scopeId: string) => (await knex('llm_spend_holds').where({ scope_id: scopeId }).orderBy('admitted_ms')).map((row) => Number(row.admitted_ms));

async function admitAt(key: SpendKey, now: number) {
  const holdId = randomUUID();
  const gen = await admitSpend(knex, key, { cost: 1_000_000, tokens: null }, { holdId, now, leaseMs: LEASE, expiresMs: now + LEASE + SETTLE_WINDOW });
  return gen === null ? null : { ...key, holdId, gen };
}

test.serial('holds of a period that is over are purged, in batches, once their lease and the settle window are over; newer ones stay', async (t) => {
  const clock = new ManualClock(DAY1);
  const dead: SpendKey[] = ['key_dead_1', 'key_dead_2', 'key_dead_3'].map((scopeId) => ({ scope: 'key', scopeId, periodStart: '2026-12-06' }));
  for (const key of dead) t.truthy(await admitAt(key, DAY1 - 5 * 60_000), 'admitted; its process dies and never settles');
  const lateEvening: SpendKey = { scope: 'user', scopeId: 'user_late', periodStart: '2026-12-06' };
  t.truthy(await admitAt(lateEvening, DAY1), 'admitted at 23:59: may still settle into its day after midnight');

  // The next day: every counter above is of a period that is over, so no admission visits it again.
  clock.set(DAY1 + 5 * 60_000);
  t.is(await purgeStaleHolds({ knex, clock }), 0, 'their settlements may still come: nothing purged');
  clock.set(DAY1 - 5 * 60_000 + LEASE + SETTLE_WINDOW + 1);
  t.is(await purgeStaleHolds({ knex, clock }, 2), 3, 'the three dead holds, two to a batch');
  for (const key of dead) t.deepEqual(await holdsOf(key.scopeId), []);
  t.deepEqual(await holdsOf('user_late'), [DAY1], 'admitted later: its settlement can still come');
  clock.set(DAY1 + LEASE + SETTLE_WINDOW + 1);
  t.is(await purgeStaleHolds({ knex, clock }), 1);
  t.deepEqual(await holdsOf('user_late'), []);
});

test.serial('a settlement after its hold was purged is not counted, and is logged', async (t) => {
  const clock = new ManualClock(DAY1);
  const warned: Array<{ fields: Record<string, unknown>; message: string }> = [];
  const deps: SpendDeps = {
    knex,
    clock,
    maxRequestMs: MAX_REQUEST_MS,
    logger: { error() {}, warn: (fields: Record<string, unknown>, message: string) => void warned.push({ fields, message }) } as unknown as SpendDeps['logger'],
  };
  const principal: Principal = { userId: 'user_slow', subject: 'user_slow', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false, apiKeyId: null };
  await writeSpendLimits(knex, clock, 'user', 'user_slow', { max_budget_micro_usd: 10_000_000 });
  const ticket = await admitRequest(deps, principal, 'm');
  t.truthy(ticket);
  clock.advance(LEASE + SETTLE_WINDOW + 1);
  t.is(await purgeStaleHolds(deps), 1);
  await ticket!.settle({ cost: 700, tokens: 30 });
  const counter = await readSpend(knex, 'user', 'user_slow', '2026-12-06');
  t.deepEqual([Number(counter.spent_micro_usd), Number(counter.tokens)], [0, 0], 'not counted');
  t.deepEqual(warned, [{ fields: { scope: 'user', scope_id: 'user_slow', period_start: '2026-12-06', cost_micro_usd: 700, tokens: 30 }, message: 'spend not counted: its hold had expired' }]);
});

test.serial('llm-api runs the purge when it starts, and stops it with the service', async (t) => {
  const old: SpendKey = { scope: 'key', scopeId: 'key_restart', periodStart: '2026-11-30' };
  const now = Date.now();
  t.truthy(await admitAt(old, now - 7 * 86_400_000));
  const stops: Array<() => void | Promise<void>> = [];
  const deps = { spend: { knex, clock: { now: () => Date.now() }, maxRequestMs: MAX_REQUEST_MS, logger: runtime.logger } } as unknown as LlmApiDeps;
  const ctx = { runtime: { logger: runtime.logger }, onStop: (stop: () => void | Promise<void>) => void stops.push(stop) } as unknown as ServiceContext;
  await usageResource.start!(deps, ctx);
  try {
    await waitFor(async () => (await holdsOf('key_restart')).length === 0, 10_000, 'the week-old hold purged');
    t.deepEqual(await holdsOf('key_restart'), [], 'the week-old hold is gone');
    t.true(stops.length > 0, 'the purge registered its stop with the service');
  } finally {
    for (const stop of stops) await stop();
  }
  t.is(stops.length, 1, 'stopped with the service');
});

test.serial('the purge reads holds through their expiry, never the whole table', async (t) => {
  // 20,000 holds over 2,000 counters and a day of admissions; a few hundred are old enough.
  const base = Date.parse('2026-12-01T00:00:00Z');
  const rows = Array.from({ length: 20_000 }, (_, i) => ({
    scope: i % 2 ? 'key' : 'user',
    scope_id: `plan_${i % 2000}`,
    period_start: '2026-12-01',
    gen: Math.floor(i / 2000),
    id: randomUUID(),
    admitted_ms: base + i * 4000,
    // A few written by an earlier version, without their expiry.
    expires_ms: i % 100 === 0 ? null : base + i * 4000 + LEASE + SETTLE_WINDOW,
  }));
  await batchInsert(knex, 'llm_spend_holds', rows);
  await analyzeOwnTables(knex);
  try {
    const { sql, bindings } = purgeSpendHoldsSql(base + 300 * 4000, 500);
    const plan = await explainSql(knex, sql, bindings);
    assertIndexBacked(t, plan, { llm_spend_holds: ['llm_spend_holds_expiry_index'] });
  } finally {
    await knex('llm_spend_holds').where('scope_id', 'like', 'plan_%').delete();
  }
});

test.serial('a request whose second budget statement fails gives back the hold its first budget took', async (t) => {
  // The user's counter refuses every write (as a statement timeout or a dropped connection would).
  await knex.raw(`create or replace function fail_user_broken() returns trigger language plpgsql as $$
    begin if new.scope_id = 'user_broken' then raise exception 'simulated database failure'; end if; return new; end $$`);
  await knex.raw('create trigger fail_user_broken before insert or update on llm_spend_counters for each row execute function fail_user_broken()');
  try {
    const clock = new ManualClock(DAY1);
    const rows = [
      { scope: 'key' as const, scope_id: 'key_of_broken', period: 'day' as const, max_budget_micro_usd: 1_000_000, max_tokens: null, allowed_models: null },
      { scope: 'user' as const, scope_id: 'user_broken', period: 'day' as const, max_budget_micro_usd: 1_000_000, max_tokens: null, allowed_models: null },
    ];
    // The key's budget first, then the user's (the order admission takes them in when the cache answers so).
    const deps: SpendDeps = { knex, clock, maxRequestMs: MAX_REQUEST_MS, logger: { error() {}, warn() {} } as unknown as SpendDeps['logger'], limitsCache: { rows: () => rows, invalidate() {} } };
    const principal: Principal = { userId: 'user_broken', subject: 'user_broken', email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false, apiKeyId: 'key_of_broken' };
    await t.throwsAsync(Promise.resolve().then(() => admitRequest(deps, principal, 'm')), { message: /simulated database failure/ });
    // Given back in the background, after the error was answered.
    await waitFor(async () => (await readSpend(knex, 'key', 'key_of_broken', '2026-12-06')).in_flight === 0, 10_000, 'the key’s slot given back');
    t.deepEqual(await holdsOf('key_of_broken'), []);
  } finally {
    await knex.raw('drop trigger fail_user_broken on llm_spend_counters');
  }
});

/**
 * `knex` whose settle statements (a release is one) wait for `gate` and then run, or fail with
 * `failWith`; every other statement runs as it is.
 */
function heldSettles(gate: Promise<void>, failWith?: Error) {
  let started!: () => void;
  const settleStarted = new Promise<void>((resolve) => (started = resolve));
  const wrapped = new Proxy(knex, {
    get(target, prop, receiver) {
      if (prop !== 'raw') return Reflect.get(target, prop, receiver);
      return (sql: string, bindings: readonly unknown[]) => {
        if (!sql.startsWith('with h as (delete from llm_spend_holds')) return target.raw(sql, bindings as Knex.RawBinding[]);
        started();
        return gate.then(() => {
          if (failWith) throw failWith;
          return target.raw(sql, bindings as Knex.RawBinding[]);
        });
      };
    },
  });
  return { knex: wrapped, settleStarted };
}

test.serial('a request whose second budget statement fails is answered without waiting for the first hold to be given back', async (t) => {
  await knex.raw(`create or replace function fail_user_slow() returns trigger language plpgsql as $$
    begin if new.scope_id = 'user_slow_db' then raise exception 'simulated database timeout'; end if; return new; end $$`);
  await knex.raw('create trigger fail_user_slow before insert or update on llm_spend_counters for each row execute function fail_user_slow()');
  try {
    const rows = [
      { scope: 'key' as const, scope_id: 'key_of_slow_db', period: 'day' as const, max_budget_micro_usd: 1_000_000, max_tokens: null, allowed_models: null },
      { scope: 'user' as const, scope_id: 'user_slow_db', period: 'day' as const, max_budget_micro_usd: 1_000_000, max_tokens: null, allowed_models: null },
    ];
    const principal: Principal = { userId: 'user_slow_db', subject: 'user_slow_db', email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false, apiKeyId: 'key_of_slow_db' };
    const warned: string[] = [];
    const logger = { error() {}, warn: (_fields: unknown, message: string) => void warned.push(message) } as unknown as SpendDeps['logger'];

    // The release hangs (the database is failing): the caller gets its error meanwhile.
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const held = heldSettles(gate);
    const deps: SpendDeps = { knex: held.knex, clock: new ManualClock(DAY1), maxRequestMs: MAX_REQUEST_MS, logger, limitsCache: { rows: () => rows, invalidate() {} } };
    const answer = Promise.resolve().then(() => admitRequest(deps, principal, 'm')).then(
      () => 'admitted',
      (error: Error) => error.message,
    );
    await held.settleStarted;
    // One turn of the event loop with the release still waiting: nothing else to wait for.
    const first = await Promise.race([answer, new Promise((resolve) => setImmediate(resolve, 'still waiting'))]);
    t.regex(String(first), /simulated database timeout/, 'answered while the release still runs');
    t.like(await readSpend(knex, 'key', 'key_of_slow_db', '2026-12-06'), { in_flight: 1 });
    open();
    await waitFor(async () => (await readSpend(knex, 'key', 'key_of_slow_db', '2026-12-06')).in_flight === 0, 10_000, 'the key’s slot given back');
    t.deepEqual(warned, []);

    // A release the database refuses too is logged; the lease ends the slot.
    const failing = heldSettles(Promise.resolve(), new Error('connection terminated'));
    const failingDeps: SpendDeps = { ...deps, knex: failing.knex };
    await t.throwsAsync(Promise.resolve().then(() => admitRequest(failingDeps, principal, 'm')), { message: /simulated database timeout/ });
    await waitFor(() => warned.length > 0, 10_000, 'the failed release logged');
    t.deepEqual(warned, ['spend hold not given back after a failed admission; its lease ends it']);
  } finally {
    await knex.raw('drop trigger fail_user_slow on llm_spend_counters');
  }
});

test.serial('a hold is purged by the expiry its own process wrote, not by a shorter longest-request setting of another process', async (t) => {
  // A rolling change raises LLM_COMPLETION_MAX_DURATION_MS: one process already runs requests of up
  // to two hours, another still has the one-minute setting and purges (and admits) meanwhile.
  const T = Date.parse('2026-12-06T08:00:00Z');
  const clock = new ManualClock(T);
  const logger = { error() {}, warn() {} } as unknown as SpendDeps['logger'];
  const longer: SpendDeps = { knex, clock, maxRequestMs: 2 * 3_600_000, logger };
  const shorter: SpendDeps = { knex, clock, maxRequestMs: MAX_REQUEST_MS, logger };
  await writeSpendLimits(knex, clock, 'user', 'user_rolling', { max_budget_micro_usd: 10_000_000 });
  const principal: Principal = { userId: 'user_rolling', subject: 'user_rolling', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false, apiKeyId: null };
  const running = await admitRequest(longer, principal, 'm');
  t.truthy(running, 'a long request admitted by the process on the longer setting');

  // Half an hour on: long past the shorter setting's lease and settle window, well within the longer one's.
  clock.set(T + 30 * 60_000);
  t.is(await purgeStaleHolds(shorter), 0, 'the purge of the process on the shorter setting leaves it');
  const other = await admitRequest(shorter, principal, 'm');
  t.truthy(other, 'an admission on the same counter by that process');
  t.is((await knex('llm_spend_holds').where({ scope_id: 'user_rolling' })).length, 2, 'which leaves it too');

  clock.set(T + 90 * 60_000);
  await running!.settle({ cost: 900, tokens: 40 });
  await other!.settle({ cost: 100, tokens: 10 });
  const counter = await readSpend(knex, 'user', 'user_rolling', '2026-12-06');
  t.deepEqual([Number(counter.spent_micro_usd), Number(counter.tokens)], [1000, 50], 'both requests counted');
});

test.serial('stopping the purge during a run of several batches ends it after the current batch', async (t) => {
  // Before every other hold of this file, so that only these five have expired.
  const T = Date.parse('2026-01-01T00:00:00Z');
  await knex('llm_spend_holds').insert(
    Array.from({ length: 5 }, (_, i) => ({ scope: 'key', scope_id: 'key_backlog', period_start: '2025-12-31', gen: 0, id: randomUUID(), admitted_ms: T - 3_600_000 + i, expires_ms: T - 60_000 + i })),
  );
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let batches = 0;
  let firstBatch!: () => void;
  const firstBatchStarted = new Promise<void>((resolve) => (firstBatch = resolve));
  // The first batch's statement waits for the test; every statement is counted.
  const held = new Proxy(knex, {
    get(target, prop, receiver) {
      if (prop !== 'raw') return Reflect.get(target, prop, receiver);
      return async (sql: string, bindings: readonly unknown[]) => {
        if (sql.startsWith('delete from llm_spend_holds where ctid') && ++batches === 1) {
          firstBatch();
          await gate;
        }
        return target.raw(sql, bindings as Knex.RawBinding[]);
      };
    },
  });
  const logger = { info() {}, warn() {}, error() {} } as unknown as SpendDeps['logger'] & { info(): void };
  const purge = startHoldPurge({ knex: held, clock: new ManualClock(T), logger }, 3_600_000, 2);
  await firstBatchStarted;
  const stopped = purge.stop();
  open();
  await stopped;
  t.is(batches, 1, 'no batch after the stop');
  t.is((await knex('llm_spend_holds').where({ scope_id: 'key_backlog' })).length, 3, 'the rest waits for the next run');
  await knex('llm_spend_holds').where({ scope_id: 'key_backlog' }).delete();
});

// Spend counters (one per key or user and period) of periods long over were kept for good. The
// purge deletes those that started before the first day of the previous month: the counters of the
// current period and of the one before it (a day's or a month's) stay, and so does any counter a
// hold still names (its settlement may still come).
const counterPeriods = async (prefix: string) =>
  (await knex('llm_spend_counters').where('scope_id', 'like', `${prefix}%`).orderBy('scope_id')).map((row) => `${row.scope_id}:${new Date(row.period_start).toISOString().slice(0, 10)}`);

test.serial('the purge deletes spend counters of periods before the previous month, in batches; the current and previous periods, and counters with a hold, stay', async (t) => {
  const now = Date.parse('2026-12-08T00:40:00Z');
  const counters = [
    ['old_day', '2026-10-31'],
    ['old_month', '2026-10-01'],
    ['older_month', '2026-09-01'],
    ['old_held', '2026-10-15'],
    ['prev_month', '2026-11-01'],
    ['prev_day', '2026-12-07'],
    ['current_day', '2026-12-08'],
    ['current_month', '2026-12-01'],
  ];
  await knex('llm_spend_counters').insert(counters.map(([id, period]) => ({ scope: 'key', scope_id: `ctr_${id}`, period_start: period, spent_micro_usd: 5 })));
  // A hold that has not expired (written as a process on a long longest-request setting would).
  await knex('llm_spend_holds').insert({ scope: 'key', scope_id: 'ctr_old_held', period_start: '2026-10-15', gen: 0, id: randomUUID(), admitted_ms: now - 60_000, expires_ms: now + 3_600_000 });
  const logged: Array<{ fields: unknown; message: string }> = [];
  const logger = { info: (fields: unknown, message: string) => void logged.push({ fields, message }), warn() {}, error() {} } as unknown as SpendDeps['logger'] & { info(): void };
  const purge = startHoldPurge({ knex, clock: new ManualClock(now), logger }, 3_600_000, 2);
  try {
    await waitFor(() => logged.some((line) => line.message === 'spend counters of past periods deleted'), 10_000, 'the counters purged');
  } finally {
    await purge.stop();
  }
  t.deepEqual(await counterPeriods('ctr_'), ['ctr_current_day:2026-12-08', 'ctr_current_month:2026-12-01', 'ctr_old_held:2026-10-15', 'ctr_prev_day:2026-12-07', 'ctr_prev_month:2026-11-01']);
  t.like(logged.find((line) => line.message === 'spend counters of past periods deleted'), { fields: { purged: 3 } });
  await knex('llm_spend_holds').where({ scope_id: 'ctr_old_held' }).delete();
  await knex('llm_spend_counters').where('scope_id', 'like', 'ctr_%').delete();
});

test.serial('stopping the purge during a run of several counter batches ends it after the current batch', async (t) => {
  const now = Date.parse('2026-12-08T00:40:00Z');
  await knex('llm_spend_counters').insert(Array.from({ length: 5 }, (_, i) => ({ scope: 'user', scope_id: `ctrstop_${i}`, period_start: `2026-0${i + 1}-01` })));
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let batches = 0;
  let firstBatch!: () => void;
  const firstBatchStarted = new Promise<void>((resolve) => (firstBatch = resolve));
  const held = new Proxy(knex, {
    get(target, prop, receiver) {
      if (prop !== 'raw') return Reflect.get(target, prop, receiver);
      return async (sql: string, bindings: readonly unknown[]) => {
        if (sql.startsWith('delete from llm_spend_counters where ctid') && ++batches === 1) {
          firstBatch();
          await gate;
        }
        return target.raw(sql, bindings as Knex.RawBinding[]);
      };
    },
  });
  const logger = { info() {}, warn() {}, error() {} } as unknown as SpendDeps['logger'] & { info(): void };
  const purge = startHoldPurge({ knex: held, clock: new ManualClock(now), logger }, 3_600_000, 2);
  await firstBatchStarted;
  const stopped = purge.stop();
  open();
  await stopped;
  t.is(batches, 1, 'no batch after the stop');
  t.is((await counterPeriods('ctrstop_')).length, 3, 'the rest waits for the next run');
  await knex('llm_spend_counters').where('scope_id', 'like', 'ctrstop_%').delete();
});

test.serial('the counter purge reads counters through their period index and holds through their key, never a whole table', async (t) => {
  // 20,000 counters over 20 months, each of the older ones with or without a hold.
  const months = Array.from({ length: 20 }, (_, i) => new Date(Date.UTC(2025, 4 + i, 1)).toISOString().slice(0, 10));
  const counters = Array.from({ length: 20_000 }, (_, i) => ({ scope: i % 2 ? 'key' : 'user', scope_id: `cplan_${i % 1000}`, period_start: months[Math.floor(i / 1000)] }));
  const holds = counters.filter((_, i) => i % 4 === 0).map((c) => ({ ...c, gen: 0, id: randomUUID(), admitted_ms: 0, expires_ms: Date.parse('2030-01-01T00:00:00Z') }));
  await batchInsert(knex, 'llm_spend_counters', counters);
  await batchInsert(knex, 'llm_spend_holds', holds);
  await analyzeOwnTables(knex);
  try {
    const { sql, bindings } = purgeSpendCountersSql('2025-07-01', 500);
    const plan = await explainSql(knex, sql, bindings);
    assertIndexBacked(t, plan, { llm_spend_counters: ['llm_spend_counters_period_start_index'], llm_spend_holds: ['llm_spend_holds_pkey'] });
  } finally {
    await knex('llm_spend_holds').where('scope_id', 'like', 'cplan_%').delete();
    await knex('llm_spend_counters').where('scope_id', 'like', 'cplan_%').delete();
  }
});
