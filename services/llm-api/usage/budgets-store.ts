import type { Knex } from 'knex';

export type SpendScope = 'key' | 'user';
export type SpendPeriod = 'day' | 'month';

export interface SpendLimitsRow {
  scope: SpendScope;
  scope_id: string;
  period: SpendPeriod;
  max_budget_micro_usd: string | number | null;
  max_tokens: string | number | null;
  allowed_models: string[] | null;
}

const LIMIT_COLUMNS = ['scope', 'scope_id', 'period', 'max_budget_micro_usd', 'max_tokens', 'allowed_models'];
const CHANGE_FIELDS = ['period', 'max_budget_micro_usd', 'max_tokens', 'allowed_models'] as const;

export async function findSpendLimits(knex: Knex, scopes: Array<{ scope: SpendScope; id: string }>): Promise<SpendLimitsRow[]> {
  if (scopes.length === 0) return [];
  return knex('llm_spend_limits')
    .where((q) => {
      for (const s of scopes) q.orWhere({ scope: s.scope, scope_id: s.id });
    })
    .select(LIMIT_COLUMNS);
}

/** The limits rows of many keys or of many users (one page of a list), in one query. */
export async function findSpendLimitsOf(knex: Knex, scope: SpendScope, ids: string[]): Promise<SpendLimitsRow[]> {
  if (ids.length === 0) return [];
  return knex('llm_spend_limits').where({ scope }).whereIn('scope_id', ids).select(LIMIT_COLUMNS);
}

/** The fields of a limits row a change may set; an absent field keeps its stored value. */
export interface SpendLimitsChange {
  period?: SpendPeriod;
  max_budget_micro_usd?: number | null;
  max_tokens?: number | null;
  allowed_models?: string[] | null;
}

/**
 * Sets the given fields of one scope's limits in a single statement, creating the row (other
 * fields at their defaults) when there is none, and returns the row as stored. Only the given
 * columns are overwritten on conflict, so concurrent changes of different fields all survive
 * (no read-modify-write). `db` may be a transaction.
 */
export async function upsertSpendLimits(
  db: Knex,
  key: { scope: SpendScope; scopeId: string },
  change: SpendLimitsChange,
  updatedAt: Date,
): Promise<SpendLimitsRow> {
  const given = CHANGE_FIELDS.filter((field) => change[field] !== undefined);
  const models = change.allowed_models;
  const [row] = await db('llm_spend_limits')
    .insert({
      scope: key.scope,
      scope_id: key.scopeId,
      period: change.period ?? 'day',
      max_budget_micro_usd: change.max_budget_micro_usd ?? null,
      max_tokens: change.max_tokens ?? null,
      allowed_models: models == null ? null : JSON.stringify(models),
      updated_at: updatedAt,
    })
    .onConflict(['scope', 'scope_id'])
    .merge([...given, 'updated_at'])
    .returning(LIMIT_COLUMNS);
  return row as SpendLimitsRow;
}

/** One counter: a key's or user's spend in the period starting `periodStart` (a UTC day). */
export interface SpendKey {
  scope: SpendScope;
  scopeId: string;
  periodStart: string;
}

/** What admission took on a counter: its hold (`holdId`, in generation `gen`), given back once by settle or release. */
export interface SpendHold extends SpendKey {
  holdId: string;
  gen: number;
}

/**
 * A statement written with named parameters (`:name`, easier to read where values repeat), turned
 * into knex's positional ones once, at load: knex would otherwise rewrite the text on every call.
 */
function positional<K extends string>(sql: string): { sql: string; bind(values: Record<K, Knex.Value>): Knex.Value[] } {
  const names: K[] = [];
  const text = sql.replace(/:(\w+)/g, (_match, name: K) => {
    names.push(name);
    return '?';
  });
  return { sql: text, bind: (values) => names.map((name) => values[name]) };
}

/** How long a hold written without its expiry (by an earlier version) is kept after its admission: longer than any lease in use. */
const LEGACY_HOLD_MS = 86_400_000;
/** A hold's expiry; the same expression as the index the purge reads (`llm_spend_holds_expiry_index`), the day a literal so that it matches. */
const EXPIRY = `coalesce(expires_ms, admitted_ms + ${LEGACY_HOLD_MS})`;

/**
 * In-flight slots as a lease. A hold belongs to the counter's current generation; a generation
 * closes at the first admission at least one lease (`leaseMs`) after it opened, its holds then
 * counted as the previous generation's, and dropped at the next close. A hold therefore counts
 * for at least one lease (no live request loses its slot: the lease outlasts the longest request)
 * and at most about three, whether or not its process lives to give it back. Settle gives a hold
 * back only to the generation it was taken in, so a slot already dropped is not taken twice.
 *
 * The hold is also a row (`llm_spend_holds`) that settle deletes in the same statement as it adds
 * the cost: a settle replayed after a commit whose answer was lost finds no row and adds nothing.
 * The rows of holds never given back (a process died) are deleted by a later admission on the
 * counter, once settle retries of theirs cannot still come, and by the periodic purge
 * (`purgeSpendHolds`) on counters that admit nothing any more (a period that is over). The instant
 * after which a hold may go is the row's own `expires_ms`, set by the process that admitted it (the
 * one whose deadline ends the request): a process on a shorter longest-request setting never deletes
 * a hold of a request still running under a longer one.
 */
const LIVE = `(case when :now < c.gen_started_ms + :lease then c.in_flight + c.in_flight_prev when :now < c.gen_started_ms + 2 * cast(:lease as bigint) then c.in_flight else 0 end)`;
const ADMIT = positional<'scope' | 'scopeId' | 'periodStart' | 'now' | 'lease' | 'holdId' | 'expires' | 'cost' | 'tokens'>(`with c as (
    insert into llm_spend_counters as c (scope, scope_id, period_start, in_flight, gen_started_ms) values (:scope, :scopeId, :periodStart, 1, :now)
    on conflict (scope, scope_id, period_start) do update set
      in_flight = case when :now < c.gen_started_ms + :lease then c.in_flight + 1 else 1 end,
      in_flight_prev = case when :now < c.gen_started_ms + :lease then c.in_flight_prev when :now < c.gen_started_ms + 2 * cast(:lease as bigint) then c.in_flight else 0 end,
      hold_gen = case when :now < c.gen_started_ms + :lease then c.hold_gen when :now < c.gen_started_ms + 2 * cast(:lease as bigint) then c.hold_gen + 1 else c.hold_gen + 2 end,
      gen_started_ms = case when :now < c.gen_started_ms + :lease then c.gen_started_ms else :now end
    where (cast(:cost as bigint) is null or (c.spent_micro_usd < :cost and (${LIVE} = 0 or ((c.settled > 0 or c.max_request_cost > 0) and c.spent_micro_usd + (${LIVE} + 1) * c.max_request_cost <= :cost))))
      and (cast(:tokens as bigint) is null or (c.tokens < :tokens and (${LIVE} = 0 or ((c.settled > 0 or c.max_request_tokens > 0) and c.tokens + (${LIVE} + 1) * c.max_request_tokens <= :tokens))))
    returning c.hold_gen),
  h as (insert into llm_spend_holds (scope, scope_id, period_start, gen, id, admitted_ms, expires_ms) select :scope, :scopeId, :periodStart, hold_gen, :holdId, :now, :expires from c),
  stale as (delete from llm_spend_holds where scope = :scope and scope_id = :scopeId and period_start = :periodStart and gen < (select hold_gen - 1 from c) and ${EXPIRY} < :now)
  select hold_gen from c`);

/**
 * Admits one request against a counter, atomically: the counter must be under its limits, and a
 * request may join others in flight only once a request of the period has settled (its cost is
 * known, 0 included) and while all of them, each costing at most the largest request seen so far,
 * still fit. Returns the generation of the hold taken, or null when refused (nothing is written).
 */
export async function admitSpend(
  knex: Knex,
  key: SpendKey,
  limits: { cost: number | null; tokens: number | null },
  hold: { holdId: string; now: number; leaseMs: number; expiresMs: number },
): Promise<number | null> {
  const result = await knex.raw(
    ADMIT.sql,
    ADMIT.bind({
      scope: key.scope,
      scopeId: key.scopeId,
      periodStart: key.periodStart,
      now: hold.now,
      lease: hold.leaseMs,
      holdId: hold.holdId,
      expires: hold.expiresMs,
      cost: limits.cost,
      tokens: limits.tokens,
    }),
  );
  return result.rows.length === 1 ? Number(result.rows[0].hold_gen) : null;
}

const SETTLE = positional<'scope' | 'scopeId' | 'periodStart' | 'gen' | 'holdId' | 'cost' | 'tokens' | 'used'>(`with h as (delete from llm_spend_holds where scope = :scope and scope_id = :scopeId and period_start = :periodStart and gen = :gen and id = :holdId returning gen)
  update llm_spend_counters c set spent_micro_usd = c.spent_micro_usd + :cost, tokens = c.tokens + :tokens, settled = c.settled + :used,
    in_flight = case when c.hold_gen = h.gen then greatest(c.in_flight - 1, 0) else c.in_flight end,
    in_flight_prev = case when c.hold_gen = h.gen + 1 then greatest(c.in_flight_prev - 1, 0) else c.in_flight_prev end,
    max_request_cost = greatest(c.max_request_cost, :cost), max_request_tokens = greatest(c.max_request_tokens, :tokens)
  from h where c.scope = :scope and c.scope_id = :scopeId and c.period_start = :periodStart returning 1 as applied`);

/**
 * Adds a finished request's real cost and tokens, and gives its hold back: once, however often it
 * is called (a retry after a lost answer finds the hold gone). Only a request that used something
 * (a token or a micro-USD) counts as settled: one that ended without (refused upstream, failed
 * before the provider answered, its input refused) shows nothing about what requests cost, and
 * counting it let every later request join in flight as if each cost 0.
 */
export async function settleSpend(knex: Knex, hold: SpendHold, spent: { cost: number; tokens: number }): Promise<boolean> {
  const used = spent.cost > 0 || spent.tokens > 0 ? 1 : 0;
  const result = await knex.raw(SETTLE.sql, SETTLE.bind({ scope: hold.scope, scopeId: hold.scopeId, periodStart: hold.periodStart, gen: hold.gen, holdId: hold.holdId, cost: spent.cost, tokens: spent.tokens, used }));
  // false: the hold was gone (given back already, or deleted as a dead process's long after its lease).
  return result.rows.length > 0;
}

// By row address: matching the batch's keys back to the table let the planner hash-join a scan of
// the whole table; the rows are locked by the select, so their addresses cannot move meanwhile.
const PURGE = `delete from llm_spend_holds where ctid = any(array(
    select ctid from llm_spend_holds where ${EXPIRY} < ? order by ${EXPIRY} limit ? for update skip locked))
  returning 1`;

/**
 * Deletes up to `limit` holds whose expiry is before `now` (the earliest first) and answers how
 * many. Admission deletes a counter's old holds only when that counter admits again, which a
 * counter of a period that is over never does: without this, the holds of requests that never
 * settled (a process that died) stayed for good. Read through the expiry's index; a hold another
 * purge (or a settlement) is deleting at that moment is skipped, not waited for.
 */
export async function purgeSpendHolds(knex: Knex, now: number, limit: number): Promise<number> {
  const result = await knex.raw(PURGE, [now, limit]);
  return result.rows.length;
}

/** The purge's statement with its values, for the index tests. */
export const purgeSpendHoldsSql = (now: number, limit: number) => ({ sql: PURGE, bindings: [now, limit] });

// As the hold purge: by row address, oldest periods first through the period's index. A counter
// that still has a hold is left (a settlement may still come for it); the holds' primary key
// answers that per counter. A correlated scalar subquery, not NOT EXISTS: the planner turned that
// into an anti-join that read the whole holds table for every batch.
const PURGE_COUNTERS = `delete from llm_spend_counters where ctid = any(array(
    select c.ctid from llm_spend_counters c where c.period_start < cast(? as date)
      and (select h.gen from llm_spend_holds h where h.scope = c.scope and h.scope_id = c.scope_id and h.period_start = c.period_start limit 1) is null
    order by c.period_start limit ? for update of c skip locked))
  returning 1`;

/**
 * Deletes up to `limit` spend counters of periods that started before `before` (a date,
 * `YYYY-MM-DD`) and have no hold left, oldest first, and answers how many. Only admission reads a
 * counter (its own period's) and only settlement writes one (the period its hold was taken in):
 * usage reports read the usage rows, never the counters. A counter another statement is
 * writing at that moment is skipped, not waited for.
 */
export async function purgeSpendCounters(knex: Knex, before: string, limit: number): Promise<number> {
  const result = await knex.raw(PURGE_COUNTERS, [before, limit]);
  return result.rows.length;
}

/** The counter purge's statement with its values, for the index tests. */
export const purgeSpendCountersSql = (before: string, limit: number) => ({ sql: PURGE_COUNTERS, bindings: [before, limit] });

/** Takes back an admission that never ran (another budget refused the request): nothing spent, nothing learnt. */
export async function releaseSpend(knex: Knex, hold: SpendHold): Promise<void> {
  await settleSpend(knex, hold, { cost: 0, tokens: 0 });
}

/**
 * Brings a counter up to the usage recorded in its period so far (the daily rollup, from
 * `periodStart` to `through`), keeping what it holds when that is more (settled costs the rollup
 * has not been written yet). For a budget whose period changed: the counter of the new period
 * kind had not counted what was spent under the other one.
 */
export async function seedSpendCounter(db: Knex, key: SpendKey, through: string): Promise<void> {
  const column = key.scope === 'key' ? 'api_key_id' : 'user_id';
  await db.raw(
    `insert into llm_spend_counters as c (scope, scope_id, period_start, spent_micro_usd, tokens)
       select ?, ?, ?, coalesce(sum(cost_micro_usd), 0), coalesce(sum(prompt_tokens + completion_tokens), 0)
       from llm_usage_daily where ?? = ? and day >= ? and day <= ?
     on conflict (scope, scope_id, period_start) do update set
       spent_micro_usd = greatest(c.spent_micro_usd, excluded.spent_micro_usd), tokens = greatest(c.tokens, excluded.tokens)`,
    [key.scope, key.scopeId, key.periodStart, column, key.scopeId, key.periodStart, through],
  );
}

export async function readSpend(knex: Knex, scope: SpendScope, scopeId: string, periodStart: string) {
  return knex('llm_spend_counters').where({ scope, scope_id: scopeId, period_start: periodStart }).first();
}
