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

/**
 * Admits one request against a counter, atomically: the counter must be under its limits, and a
 * request may join others in flight only once a request of the period has settled (its cost is
 * known, 0 included) and while all of them, each costing at most the largest request seen so far,
 * still fit. Returns false when refused (the row is left unchanged).
 */
export async function admitSpend(knex: Knex, key: { scope: SpendScope; scopeId: string; periodStart: string }, limits: { cost: number | null; tokens: number | null }): Promise<boolean> {
  const result = await knex.raw(
    `insert into llm_spend_counters as c (scope, scope_id, period_start, in_flight) values (?, ?, ?, 1)
     on conflict (scope, scope_id, period_start) do update set in_flight = c.in_flight + 1
     where (?::bigint is null or (c.spent_micro_usd < ?::bigint and (c.in_flight = 0 or ((c.settled > 0 or c.max_request_cost > 0) and c.spent_micro_usd + (c.in_flight + 1) * c.max_request_cost <= ?::bigint))))
       and (?::bigint is null or (c.tokens < ?::bigint and (c.in_flight = 0 or ((c.settled > 0 or c.max_request_tokens > 0) and c.tokens + (c.in_flight + 1) * c.max_request_tokens <= ?::bigint))))
     returning in_flight`,
    [key.scope, key.scopeId, key.periodStart, limits.cost, limits.cost, limits.cost, limits.tokens, limits.tokens, limits.tokens],
  );
  return result.rows.length === 1;
}

/**
 * Adds a finished request's real cost and tokens, and takes it out of the in-flight count. Only a
 * request that used something (a token or a micro-USD) counts as settled: one that ended without
 * (refused upstream, failed before the provider answered, its input refused) shows nothing about
 * what requests cost, and counting it let every later request join in flight as if each cost 0.
 */
export async function settleSpend(knex: Knex, key: { scope: SpendScope; scopeId: string; periodStart: string }, spent: { cost: number; tokens: number }): Promise<void> {
  const used = spent.cost > 0 || spent.tokens > 0 ? 1 : 0;
  await knex.raw(
    `update llm_spend_counters set spent_micro_usd = spent_micro_usd + ?, tokens = tokens + ?, in_flight = greatest(in_flight - 1, 0), settled = settled + ?,
       max_request_cost = greatest(max_request_cost, ?), max_request_tokens = greatest(max_request_tokens, ?)
     where scope = ? and scope_id = ? and period_start = ?`,
    [spent.cost, spent.tokens, used, spent.cost, spent.tokens, key.scope, key.scopeId, key.periodStart],
  );
}

/** Takes back an admission that never ran (another budget refused the request): nothing spent, nothing learnt. */
export async function releaseSpend(knex: Knex, key: { scope: SpendScope; scopeId: string; periodStart: string }): Promise<void> {
  await knex.raw('update llm_spend_counters set in_flight = greatest(in_flight - 1, 0) where scope = ? and scope_id = ? and period_start = ?', [key.scope, key.scopeId, key.periodStart]);
}

export async function readSpend(knex: Knex, scope: SpendScope, scopeId: string, periodStart: string) {
  return knex('llm_spend_counters').where({ scope, scope_id: scopeId, period_start: periodStart }).first();
}
