import type { Knex } from 'knex';
import { z } from 'zod';
import { ApiError, isDependencyUnavailable, isPending, runEvery, type Clock, type Logger, type MaybePromise, type Periodic, type Principal } from '../../kit/index.js';
import { randomUUID } from 'node:crypto';
import { admitSpend, findSpendLimits, findSpendLimitsOf, purgeSpendCounters, purgeSpendHolds, readSpend, releaseSpend, seedSpendCounter, settleSpend, upsertSpendLimits, type SpendHold, type SpendLimitsRow, type SpendPeriod, type SpendScope } from './budgets-store.js';

/**
 * Budgets and model allow-lists on API keys and on users.
 *
 * Admission, before a request goes upstream: the requested model must match every allow-list that
 * applies (the key's and the user's; 403 naming the model otherwise), and every budget that applies
 * must admit it (429 `insufficient_quota` with the reset time otherwise). Counters live in the
 * database, so every llm-api process enforces the same budget; the real cost and tokens are added
 * when the answer ends (a stream is allowed to finish over budget).
 *
 * Overshoot: a request joins others in flight only once a request of the period has settled and
 * while all of them, each costing at most the largest request seen so far in the period (0 for a
 * model without a price), still fit; when that cannot be shown, requests are
 * admitted one at a time while under budget. So a budget is exceeded by at most one request (more
 * only if a request costs more than every one before it). A process that dies mid-request leaves
 * its slot counted as in flight for a bounded time (a lease of the longest request plus a minute;
 * budgets-store.ts), which only makes admission stricter meanwhile. A settlement is counted once,
 * however often it is retried.
 *
 * A request is charged to the period containing the instant it was admitted (`SpendTicket.at`),
 * and its usage record carries that instant, so the usage report's day is the day it was charged to.
 */
export interface SpendDeps {
  knex: Knex;
  clock: Clock;
  logger: Pick<Logger, 'error' | 'warn'>;
  /** GUEST_ALLOWED_MODELS: the models guests may use; empty = every model. */
  guestAllowedModels?: string[];
  /** Where admission reads a key's and a user's limits (absent: from the database on every request). */
  limitsCache?: SpendLimitsCache;
  /**
   * The longest a chat request may run (LLM_COMPLETION_MAX_DURATION_MS; absent: its default): an
   * in-flight slot is held for this plus a minute before it may be dropped (a process that died).
   */
  maxRequestMs?: number;
}

/**
 * Budgets and allow-lists as admission reads them, cached per key and per user for `ttlMs`
 * (`LLM_SPEND_LIMITS_CACHE_MS`): without it every chat request cost one database query before going
 * upstream. Only the limits are cached; the spend counters are always read and updated in the
 * database, so every process still enforces the same budget. A change made through this process
 * (`setSpendLimits`) applies at once; one made through another llm-api process applies here within
 * `ttlMs` (the same rule as users' cached rows, `IDENTITY_CACHE_TTL_MS`). Concurrent misses for the
 * same caller share one query.
 */
export interface SpendLimitsCache {
  /** The rows themselves once a read has settled (no promise per request), the shared read while it runs. */
  rows(knex: Knex, scopes: Array<{ scope: SpendScope; id: string }>): MaybePromise<SpendLimitsRow[]>;
  invalidate(scope: SpendScope, id: string): void;
}

export function createSpendLimitsCache(options: { ttlMs: number; clock: Clock; maxEntries?: number }): SpendLimitsCache {
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, { rows: MaybePromise<SpendLimitsRow[]>; expires: number }>();
  return {
    rows(knex, scopes) {
      if (options.ttlMs <= 0) return findSpendLimits(knex, scopes);
      const key = scopes.map((s) => `${s.scope}:${s.id}`).join(' ');
      const now = options.clock.now();
      const hit = entries.get(key);
      if (hit && hit.expires > now) return hit.rows;
      const rows = findSpendLimits(knex, scopes);
      if (entries.size >= maxEntries) entries.delete(entries.keys().next().value as string);
      const entry: { rows: MaybePromise<SpendLimitsRow[]>; expires: number } = { rows, expires: now + options.ttlMs };
      entries.set(key, entry);
      rows.then(
        (settled) => {
          entry.rows = settled;
        },
        // A failed read is not kept: the next request asks again.
        () => {
          if (entries.get(key) === entry) entries.delete(key);
        },
      );
      return rows;
    },
    invalidate(scope, id) {
      const part = `${scope}:${id}`;
      for (const key of entries.keys()) if (key.split(' ').includes(part)) entries.delete(key);
    },
  };
}

const modelPattern = z.string().trim().min(1).max(300);
/** The budget fields API keys and users accept (create and patch). `null` clears a field. */
export const spendFields = {
  budget_period: z.enum(['day', 'month']).optional(),
  max_budget_micro_usd: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
  max_tokens: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
  allowed_models: z.array(modelPattern).max(256).nullable().optional(),
};
export interface SpendInput {
  budget_period?: SpendPeriod;
  max_budget_micro_usd?: number | null;
  max_tokens?: number | null;
  allowed_models?: string[] | null;
}

export const hasSpendInput = (input: SpendInput) =>
  input.budget_period !== undefined || input.max_budget_micro_usd !== undefined || input.max_tokens !== undefined || input.allowed_models !== undefined;

export interface SpendView {
  budget_period: SpendPeriod;
  max_budget_micro_usd: number | null;
  max_tokens: number | null;
  allowed_models: string[] | null;
}

/** The budget fields of a key or user answer (`SpendView`), for response schemas and the API document. */
export const spendViewFields = {
  budget_period: z.enum(['day', 'month']),
  max_budget_micro_usd: z.number().int().nullable(),
  max_tokens: z.number().int().nullable(),
  allowed_models: z.array(z.string()).nullable(),
};

function viewOf(row: SpendLimitsRow | undefined): SpendView {
  return {
    budget_period: row?.period ?? 'day',
    max_budget_micro_usd: row?.max_budget_micro_usd == null ? null : Number(row.max_budget_micro_usd),
    max_tokens: row?.max_tokens == null ? null : Number(row.max_tokens),
    allowed_models: row?.allowed_models ?? null,
  };
}

export async function getSpendLimits(deps: SpendDeps, scope: SpendScope, id: string): Promise<SpendView> {
  const [row] = await findSpendLimits(deps.knex, [{ scope, id }]);
  return viewOf(row);
}

/**
 * Writes the fields given (others keep their value) and returns the resulting limits: one upsert
 * statement, so concurrent changes of different fields never undo each other. `db` may be the
 * caller's transaction (then the caller calls `limitsChanged` once it committed).
 */
export async function writeSpendLimits(db: Knex, clock: Clock, scope: SpendScope, id: string, input: SpendInput): Promise<SpendView> {
  // A new period kind starts its counter from what the period's usage already is (seedSpendCounter):
  // read only when a period is given, which only the budget forms and admin writes do.
  const before = input.budget_period === undefined ? undefined : (await findSpendLimits(db, [{ scope, id }]))[0];
  const row = await upsertSpendLimits(
    db,
    { scope, scopeId: id },
    { period: input.budget_period, max_budget_micro_usd: input.max_budget_micro_usd, max_tokens: input.max_tokens, allowed_models: input.allowed_models },
    new Date(clock.now()),
  );
  // Only a budget that was already counting: one set where there was none starts as it always has.
  if (before && hasBudget(before) && row.period !== before.period) {
    const now = clock.now();
    await seedSpendCounter(db, { scope, scopeId: id, periodStart: periodOf(row.period, now).start }, periodOf('day', now).start);
  }
  return viewOf(row);
}

/** Sets the fields given (others keep their value) and returns the resulting limits. */
export async function setSpendLimits(deps: SpendDeps, scope: SpendScope, id: string, input: SpendInput): Promise<SpendView> {
  const view = await writeSpendLimits(deps.knex, deps.clock, scope, id, input);
  deps.limitsCache?.invalidate(scope, id);
  return view;
}

/**
 * Budgets and allow-lists as identity writes them with a key or a user, inside its own
 * transaction: `apply` writes the fields given (or reads the current limits when none is given)
 * through `db`; `changed` drops this process's cached limits once that transaction committed.
 */
export interface SpendLimitsPort {
  apply(db: Knex, scope: SpendScope, id: string, input: SpendInput): Promise<SpendView>;
  changed(scope: SpendScope, id: string): void;
  /**
   * The limits of each of `ids` (one page of keys or users) in one query, from the database (never
   * admission's cache): an id without limits has the defaults (`day`, no budget, every model).
   */
  read(db: Knex, scope: SpendScope, ids: string[]): Promise<Map<string, SpendView>>;
}

export function spendLimitsPort(deps: Pick<SpendDeps, 'clock' | 'limitsCache'>): SpendLimitsPort {
  return {
    async apply(db, scope, id, input) {
      if (hasSpendInput(input)) return writeSpendLimits(db, deps.clock, scope, id, input);
      const [row] = await findSpendLimits(db, [{ scope, id }]);
      return viewOf(row);
    },
    changed(scope, id) {
      deps.limitsCache?.invalidate(scope, id);
    },
    async read(db, scope, ids) {
      const rows = new Map((await findSpendLimitsOf(db, scope, ids)).map((row) => [row.scope_id, row]));
      return new Map(ids.map((id) => [id, viewOf(rows.get(id))]));
    },
  };
}

/** `*` matches any run of characters; everything else is literal. */
export function modelAllowed(patterns: string[], model: string): boolean {
  return patterns.some((p) => (p.includes('*') ? globMatches(p, model) : p === model));
}

/**
 * Whether `text` matches `pattern` (`*`: any run of characters, possibly empty), in at most
 * (pattern length × text length) steps: on a mismatch only the last `*` seen takes one more character.
 * A pattern turned into a regular expression (`.*` per star) backtracked on the order of (name
 * length)^(stars) steps on a pattern of many stars and a model name that almost matches ('*a*a*…*b'
 * against 'aaa…'): a key's owner could set such an allow-list and stall the process with one chat
 * request (or one model list).
 */
function globMatches(pattern: string, text: string): boolean {
  let p = 0;
  let t = 0;
  let star = -1;
  let resume = 0;
  while (t < text.length) {
    const c = pattern.charCodeAt(p);
    if (c === STAR) {
      star = p++;
      resume = t;
    } else if (p < pattern.length && c === text.charCodeAt(t)) {
      p++;
      t++;
    } else if (star >= 0) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (pattern.charCodeAt(p) === STAR) p++;
  return p === pattern.length;
}
const STAR = 42; // '*'

/** Start of the period containing `now` (UTC) and the start of the next one. */
export function periodOf(period: SpendPeriod, now: number): { start: string; resetsAt: Date } {
  const d = new Date(now);
  if (period === 'month') {
    return { start: new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)).toISOString().slice(0, 10), resetsAt: new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)) };
  }
  const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  return { start: new Date(start).toISOString().slice(0, 10), resetsAt: new Date(start + 86_400_000) };
}

export interface SpendTicket {
  /**
   * The instant (clock milliseconds) the request was admitted at, which chose its periods: its
   * usage record carries it, so the day the report shows it on is the day it was charged to.
   */
  readonly at: number;
  /** Adds the request's real cost and tokens to every counter it was admitted against (once). */
  settle(spent: { cost: number; tokens: number }): Promise<void>;
}

const who = (scope: SpendScope) => (scope === 'key' ? 'this API key' : 'this account');

/**
 * Checks allow-lists and admits the request against every budget that applies; null when none
 * applies. Synchronous when the caller's limits are cached and set no budget (no counter to reserve).
 */
export function admitRequest(deps: SpendDeps, principal: Principal, model: string, served: string = model): MaybePromise<SpendTicket | null> {
  if (principal.isGuest && deps.guestAllowedModels?.length) {
    const refused = outsideList(deps.guestAllowedModels, model, served);
    if (refused !== null) throw new ApiError(403, `The model '${refused}'${servesFor(refused, model)} is not available to guest accounts; sign in or use an API key`, { code: 'model_not_allowed', param: 'model' });
  }
  const rows = limitsOf(deps, principal);
  return isPending(rows) ? rows.then((settled) => admitAgainst(deps, settled, model, served)) : admitAgainst(deps, rows, model, served);
}

/** The first of the model asked for and the one serving it that `list` does not admit; null when both are admitted. */
function outsideList(list: string[], model: string, served: string): string | null {
  if (!modelAllowed(list, model)) return model;
  return served !== model && !modelAllowed(list, served) ? served : null;
}

/** Names the model asked for when another one serves it (its instruct model, `enable_thinking: false`). */
const servesFor = (id: string, asked: string) => (id === asked ? '' : ` (which serves '${asked}' with enable_thinking: false)`);

/** The caller's key and user limits (both apply), from the cache when there is one. */
function limitsOf(deps: SpendDeps, principal: Principal): MaybePromise<SpendLimitsRow[]> {
  const scopes: Array<{ scope: SpendScope; id: string }> = [{ scope: 'user', id: principal.userId }];
  if (principal.apiKeyId) scopes.unshift({ scope: 'key', id: principal.apiKeyId });
  return deps.limitsCache ? deps.limitsCache.rows(deps.knex, scopes) : findSpendLimits(deps.knex, scopes);
}

/**
 * Which models the caller may use, by the allow-lists admission applies (the guest setting, the
 * key's, the user's): what `GET /v1/models` lists and `GET /v1/models/{model}` shows. Synchronous
 * when the caller's limits are cached, so reading the model list costs no database query then.
 */
export function modelAccess(deps: SpendDeps, principal: Principal): MaybePromise<(model: string) => boolean> {
  const lists = (rows: SpendLimitsRow[]) => {
    const patterns = rows.flatMap((row) => (row.allowed_models ? [row.allowed_models] : []));
    if (principal.isGuest && deps.guestAllowedModels?.length) patterns.unshift(deps.guestAllowedModels);
    return (model: string) => patterns.every((list) => modelAllowed(list, model));
  };
  const rows = limitsOf(deps, principal);
  return isPending(rows) ? rows.then(lists) : lists(rows);
}

/**
 * Allow-lists apply to the model asked for and to the one that serves it (an instruct model serving
 * a reasoning model's `enable_thinking: false`): a list without the instruct model is not passed by
 * asking for the reasoning model.
 */
function admitAgainst(deps: SpendDeps, rows: SpendLimitsRow[], model: string, served: string): MaybePromise<SpendTicket | null> {
  for (const row of rows) {
    const refused = row.allowed_models ? outsideList(row.allowed_models, model, served) : null;
    if (refused !== null) throw new ApiError(403, `The model '${refused}'${servesFor(refused, model)} is not allowed for ${who(row.scope)}`, { code: 'model_not_allowed', param: 'model' });
  }
  if (!rows.some(hasBudget)) return null;
  return reserveBudgets(deps, rows);
}

const hasBudget = (row: SpendLimitsRow) => row.max_budget_micro_usd != null || row.max_tokens != null;

/** Reserves the request against each budget (all or none), or refuses it with 429. */
async function reserveBudgets(deps: SpendDeps, rows: SpendLimitsRow[]): Promise<SpendTicket | null> {
  const now = deps.clock.now();
  const leaseMs = (deps.maxRequestMs ?? DEFAULT_MAX_REQUEST_MS) + HOLD_MARGIN_MS;
  // One id for the request's holds (one per counter): what makes its settlement count once.
  // Its expiry goes with the hold: only this process knows how long its request may run.
  const hold = { holdId: randomUUID(), now, leaseMs, expiresMs: now + leaseMs + SETTLE_WINDOW_MS };
  const admitted: SpendHold[] = [];
  const release = () => Promise.all(admitted.map((held) => releaseSpend(deps.knex, held)));
  for (const row of rows) {
    const cost = row.max_budget_micro_usd == null ? null : Number(row.max_budget_micro_usd);
    const tokens = row.max_tokens == null ? null : Number(row.max_tokens);
    if (cost === null && tokens === null) continue;
    const { start, resetsAt } = periodOf(row.period, now);
    const key = { scope: row.scope, scopeId: row.scope_id, periodStart: start };
    let gen: number | null;
    try {
      gen = cost !== 0 && tokens !== 0 ? await admitSpend(deps.knex, key, { cost, tokens }, hold) : null;
    } catch (error) {
      // An earlier counter (the key's) admitted and this statement failed (a timeout, a dropped
      // connection): the request does not run, so that hold is given back now rather than counted
      // in flight until its lease runs out (admission one at a time, `budget_busy`, for half an
      // hour and more). In the background: the database is failing, and waiting for one more
      // statement doubled the time the caller waits for its error (a timeout, twice). If the
      // database cannot take it either, the lease still ends the slot.
      void release().catch((releaseError: unknown) =>
        deps.logger.warn({ err: (releaseError as Error).message, counters: admitted.map((held) => `${held.scope}:${held.scopeId}:${held.periodStart}`) }, 'spend hold not given back after a failed admission; its lease ends it'),
      );
      throw error;
    }
    if (gen === null) {
      await release();
      const counter = cost !== 0 && tokens !== 0 ? await readSpend(deps.knex, key.scope, key.scopeId, key.periodStart) : undefined;
      const under = counter && (cost === null || Number(counter.spent_micro_usd) < cost) && (tokens === null || Number(counter.tokens) < tokens);
      if (under) {
        // Not used up, but the requests still running might use up the rest: try again in a moment.
        throw new ApiError(429, `The ${row.period === 'day' ? 'daily' : 'monthly'} budget of ${who(row.scope)} is nearly used up and other requests are still running; retry in a moment`, {
          code: 'budget_busy',
          headers: { 'retry-after': '1' },
        });
      }
      const retryAfter = Math.max(1, Math.ceil((resetsAt.getTime() - now) / 1000));
      throw new ApiError(429, `The ${row.period === 'day' ? 'daily' : 'monthly'} budget of ${who(row.scope)} is used up; it resets at ${resetsAt.toISOString()}`, {
        code: 'insufficient_quota',
        headers: { 'retry-after': String(retryAfter), 'x-budget-reset': resetsAt.toISOString() },
      });
    }
    admitted.push({ scopeId: key.scopeId, scope: key.scope, periodStart: start, holdId: hold.holdId, gen });
  }
  if (admitted.length === 0) return null;
  let settled = false;
  return {
    at: now,
    async settle(spent) {
      if (settled) return;
      settled = true;
      await Promise.all(
        admitted.map((held) =>
          settleSpend(deps.knex, held, spent).then(
            (applied) => applied || lateSettlement(deps, held, spent),
            (error) => settleLater(deps, held, spent, error, 0),
          ),
        ),
      );
    },
  };
}

/** Holds deleted per statement by the purge: short statements, each a small lock set. */
const PURGE_BATCH = 500;
/** How often each llm-api process purges old holds (with the default longest request, a hold is purged 46 minutes after its admission at the earliest). */
export const HOLD_PURGE_INTERVAL_MS = 10 * 60_000;

/**
 * Deletes the holds of requests that never settled (their process died) once their lease and the
 * settle retry window are over, on every counter, in batches; answers how many. Admission does the
 * same for the counter it admits on, but a counter of a period that is over never admits again, so
 * its leftover holds stayed for good. A hold can matter after its period ended (a request admitted
 * at 23:59 settles into the day it was admitted on), so the hold's own expiry decides, not its
 * period; that expiry was set by the process that admitted it, whatever this process's longest
 * request is. A settlement that comes after the purge finds its hold gone: not counted, and
 * logged, as for a hold admission deleted. `stopping` is asked between batches: a large backlog
 * does not hold up a shutdown (the rest waits for the next run, of this process or another).
 */
export async function purgeStaleHolds(deps: Pick<SpendDeps, 'knex' | 'clock'>, batchSize = PURGE_BATCH, stopping: () => boolean = () => false): Promise<number> {
  const now = deps.clock.now();
  let total = 0;
  for (;;) {
    const deleted = await purgeSpendHolds(deps.knex, now, batchSize);
    total += deleted;
    if (deleted < batchSize || stopping()) return total;
  }
}

/**
 * The first period start whose counters are kept: the first day of the previous UTC month. Every
 * counter of the current period and of the one before it, day or month, starts on or after it, so
 * a settlement arriving late for the previous period still finds its counter; what starts before
 * it ended at least a month ago (a month budget's) or about a month ago (a day budget's).
 */
export function counterKeepFrom(now: number): string {
  const d = new Date(now);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - 1, 1)).toISOString().slice(0, 10);
}

/**
 * Deletes the spend counters (one per key or user and period) of periods before `counterKeepFrom`
 * that no hold names any more, in batches; answers how many. Nothing reads them (admission reads its
 * own period's counter, usage reports read the usage rows), and a counter is written once per key
 * or user and period, so without this the table only grew. `stopping` is asked between batches.
 */
export async function purgeOldCounters(deps: Pick<SpendDeps, 'knex' | 'clock'>, batchSize = PURGE_BATCH, stopping: () => boolean = () => false): Promise<number> {
  const before = counterKeepFrom(deps.clock.now());
  let total = 0;
  for (;;) {
    const deleted = await purgeSpendCounters(deps.knex, before, batchSize);
    total += deleted;
    if (deleted < batchSize || stopping()) return total;
  }
}

/**
 * Runs the purge (stale holds, then old counters: a counter goes only once its holds are gone) at
 * start and then every `intervalMs` after the last run ended; `stop` ends a run in progress after
 * its current batch, and waits for that.
 */
export function startHoldPurge(deps: Pick<SpendDeps, 'knex' | 'clock'> & { logger: Pick<Logger, 'info' | 'warn'> }, intervalMs = HOLD_PURGE_INTERVAL_MS, batchSize = PURGE_BATCH): Periodic {
  let stopping = false;
  const periodic = runEvery(
    intervalMs,
    async () => {
      const purged = await purgeStaleHolds(deps, batchSize, () => stopping);
      if (purged > 0) deps.logger.info({ purged }, 'spend holds of requests that never settled deleted');
      if (stopping) return;
      const counters = await purgeOldCounters(deps, batchSize, () => stopping);
      if (counters > 0) deps.logger.info({ purged: counters }, 'spend counters of past periods deleted');
    },
    (error) => deps.logger.warn({ err: error.message }, 'spend hold purge failed; retrying at the next interval'),
    { immediate: true },
  );
  return {
    async stop() {
      stopping = true;
      await periodic.stop();
    },
  };
}

/**
 * A first settlement that found its hold gone: the request outlived its lease by the whole retry
 * window, and a later admission or the periodic purge deleted the hold as a dead process's. Its
 * cost is not counted; said so, since the budget now reads less than was spent. (A retry finding it
 * gone is the lost-commit case, counted already.)
 */
function lateSettlement(deps: SpendDeps, key: SpendHold, spent: { cost: number; tokens: number }): void {
  if (spent.cost > 0 || spent.tokens > 0) {
    deps.logger.warn({ scope: key.scope, scope_id: key.scopeId, period_start: key.periodStart, cost_micro_usd: spent.cost, tokens: spent.tokens }, 'spend not counted: its hold had expired');
  }
}

/** Retries of a settlement the database could not take: 0.5 s doubling to 30 s, about 10 minutes in all. */
const SETTLE_RETRY_FIRST_MS = 500;
const SETTLE_RETRY_MAX_MS = 30_000;
const SETTLE_RETRIES = 25;
/** How long settle retries can go on after a request ended (about 10 minutes, with room). */
const SETTLE_WINDOW_MS = 15 * 60_000;
/** LLM_COMPLETION_MAX_DURATION_MS's default, for deps that do not say. */
const DEFAULT_MAX_REQUEST_MS = 1_800_000;
/** Between admission and the deadline's timer starting, and between the request's end and its settle. */
const HOLD_MARGIN_MS = 60_000;

/**
 * A settlement that failed because the database could not be reached (a blip, a failover) is
 * retried off the request path until it is written: dropping it left the request's cost out of
 * the budget (the key could spend past it) and its slot in flight until its lease ran out. A
 * statement the database refuses is not retried. Retries still waiting when the process exits are lost.
 * An attempt whose commit went through but whose answer was lost is retried too: the retry finds
 * the hold it gives back gone and adds nothing, so the cost counts once.
 */
function settleLater(deps: SpendDeps, key: SpendHold, spent: { cost: number; tokens: number }, error: unknown, retries: number): void {
  const fields = { err: (error as Error).message, scope: key.scope, scope_id: key.scopeId, period_start: key.periodStart, cost_micro_usd: spent.cost, tokens: spent.tokens };
  if (!isDependencyUnavailable(error) || retries >= SETTLE_RETRIES) {
    deps.logger.error(fields, 'spend counter not settled');
    return;
  }
  const delay = Math.min(SETTLE_RETRY_MAX_MS, SETTLE_RETRY_FIRST_MS * 2 ** retries);
  setTimeout(() => {
    settleSpend(deps.knex, key, spent).catch((next) => settleLater(deps, key, spent, next, retries + 1));
  }, delay).unref();
}
