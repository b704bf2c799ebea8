import type { Migration } from '../../kit/index.js';

/** One row per chat completion request, written in batches off the request path. */
export const usageTables: Migration = {
  name: '20261122_3200_llm_usage',
  async up(knex) {
    await knex.schema.createTable('llm_usage', (t) => {
      t.bigIncrements('id');
      t.string('request_id', 128).notNullable();
      t.string('user_id', 64);
      t.string('auth_method', 16);
      t.string('api_key_id', 64);
      t.string('model', 300).notNullable();
      t.string('provider_id', 64);
      t.string('provider_model_id', 64);
      t.text('endpoint');
      t.boolean('stream').notNullable().defaultTo(false);
      t.integer('prompt_tokens').notNullable().defaultTo(0);
      t.integer('completion_tokens').notNullable().defaultTo(0);
      t.integer('reasoning_tokens').notNullable().defaultTo(0);
      t.integer('total_tokens').notNullable().defaultTo(0);
      t.bigInteger('cost_micro_usd').notNullable().defaultTo(0);
      t.integer('latency_ms').notNullable();
      t.integer('ttfb_ms');
      t.integer('attempts').notNullable().defaultTo(1);
      t.integer('status').notNullable(); // HTTP status; 499 = client closed
      t.string('outcome', 32).notNullable(); // ok | upstream_error | client_closed | stream_error | …
      t.jsonb('metadata');
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.index(['user_id', 'created_at']);
      t.index(['model', 'created_at']);
    });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_usage');
  },
};

/**
 * The raw records keep only their primary key. Nothing in the platform reads them (the reports read
 * the daily rollup below), and they only grow: the two indexes by user and by model cost every
 * record two more index insertions for lookups nobody makes (the embedded database: 12.3 against
 * 9.5 µs of CPU per row for the whole batch statement). An operator who queries the raw rows by a
 * column adds an index of their own (docs/operations.md, "Usage and cost").
 */
export const usageRawKeyOnly: Migration = {
  name: '20261130_1600_llm_usage_raw_key_only',
  async up(knex) {
    await knex.raw('drop index if exists llm_usage_user_id_created_at_index');
    await knex.raw('drop index if exists llm_usage_model_created_at_index');
  },
  async down(knex) {
    await knex.schema.alterTable('llm_usage', (t) => {
      t.index(['user_id', 'created_at']);
      t.index(['model', 'created_at']);
    });
  },
};

/**
 * Whether a raw record's counts (and so its cost) are the gateway's estimate rather than the
 * provider's report: a stream that ended without the provider's usage chunk (the client left, the
 * deadline, a failure mid-stream) is charged an estimate instead of nothing (docs/llm.md, "Usage").
 * Existing rows were all taken from reports (or recorded as 0): false.
 */
export const usageEstimated: Migration = {
  name: '20261206_1900_llm_usage_estimated',
  async up(knex) {
    await knex.schema.alterTable('llm_usage', (t) => {
      t.boolean('usage_estimated').notNullable().defaultTo(false);
    });
  },
  async down(knex) {
    await knex.schema.alterTable('llm_usage', (t) => {
      t.dropColumn('usage_estimated');
    });
  },
};

/**
 * The daily rollup the usage reports read: one row per UTC day × user × key × model × provider ×
 * project, kept current by the same statement that writes the raw rows (store.ts). Missing
 * dimensions are stored as '' so the primary key can be the upsert target; reads map '' to null.
 * Existing raw rows are folded in once here.
 */
export const usageRollupTables: Migration = {
  name: '20261123_0200_llm_usage_daily',
  async up(knex) {
    await knex.schema.alterTable('llm_usage', (t) => {
      t.string('project_id', 64);
    });
    await knex.schema.createTable('llm_usage_daily', (t) => {
      t.date('day').notNullable();
      t.string('user_id', 64).notNullable();
      t.string('api_key_id', 64).notNullable();
      t.string('model', 300).notNullable();
      t.string('provider_id', 64).notNullable();
      t.string('project_id', 64).notNullable();
      t.bigInteger('requests').notNullable().defaultTo(0);
      t.bigInteger('prompt_tokens').notNullable().defaultTo(0);
      t.bigInteger('completion_tokens').notNullable().defaultTo(0);
      t.bigInteger('reasoning_tokens').notNullable().defaultTo(0);
      t.bigInteger('cost_micro_usd').notNullable().defaultTo(0);
      t.primary(['day', 'user_id', 'api_key_id', 'model', 'provider_id', 'project_id']);
      t.index(['user_id', 'day']);
      t.index(['api_key_id', 'day']);
    });
    await knex.raw(`insert into llm_usage_daily
      select (created_at at time zone 'UTC')::date, coalesce(user_id, ''), coalesce(api_key_id, ''), model, coalesce(provider_id, ''), coalesce(project_id, ''),
             count(*), sum(prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cost_micro_usd)
      from llm_usage group by 1, 2, 3, 4, 5, 6`);
  },
  async down(knex) {
    await knex.schema.dropTable('llm_usage_daily');
    await knex.schema.alterTable('llm_usage', (t) => t.dropColumn('project_id'));
  },
};

/**
 * Budgets and model allow-lists of API keys and users (`scope` = 'key' | 'user'), and the spend
 * counters that enforce them across llm-api processes: one row per scope and period, admitted and
 * settled with single conditional statements (budgets.ts explains the admission rule).
 */
export const spendTables: Migration = {
  name: '20261123_0210_llm_spend_limits',
  async up(knex) {
    await knex.schema.createTable('llm_spend_limits', (t) => {
      t.string('scope', 8).notNullable();
      t.string('scope_id', 64).notNullable();
      t.string('period', 8).notNullable().defaultTo('day');
      t.bigInteger('max_budget_micro_usd');
      t.bigInteger('max_tokens');
      t.jsonb('allowed_models');
      t.timestamp('updated_at', { useTz: true }).notNullable();
      t.primary(['scope', 'scope_id']);
    });
    await knex.schema.createTable('llm_spend_counters', (t) => {
      t.string('scope', 8).notNullable();
      t.string('scope_id', 64).notNullable();
      t.date('period_start').notNullable();
      t.bigInteger('spent_micro_usd').notNullable().defaultTo(0);
      t.bigInteger('tokens').notNullable().defaultTo(0);
      t.integer('in_flight').notNullable().defaultTo(0);
      t.bigInteger('max_request_cost').notNullable().defaultTo(0);
      t.bigInteger('max_request_tokens').notNullable().defaultTo(0);
      t.primary(['scope', 'scope_id', 'period_start']);
    });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_spend_counters');
    await knex.schema.dropTable('llm_spend_limits');
  },
};

/**
 * How many requests each spend counter has settled. Admission lets a request join others in flight
 * only once the period's requests have shown their cost; `max_request_cost > 0` stood for that,
 * and was never true where every request costs 0 (a model without a price), so such requests were
 * admitted one at a time. Existing rows start at 0, their `max_request_*` still counting as before.
 */
export const spendSettledCount: Migration = {
  name: '20261206_1600_llm_spend_settled',
  async up(knex) {
    await knex.schema.alterTable('llm_spend_counters', (t) => {
      t.bigInteger('settled').notNullable().defaultTo(0);
    });
  },
  async down(knex) {
    await knex.schema.alterTable('llm_spend_counters', (t) => {
      t.dropColumn('settled');
    });
  },
};

/**
 * Prompt tokens the provider served from its cache (`prompt_tokens_details.cached_tokens`, part of
 * the prompt count), on each raw record and summed in the daily rollup: a model with a cached-prompt
 * price charges them at that rate, and without the count the report's cost could not be checked
 * against its tokens. Existing rows were recorded without it: 0.
 */
export const usageCachedTokens: Migration = {
  name: '20261207_1500_llm_usage_cached_tokens',
  async up(knex) {
    await knex.schema.alterTable('llm_usage', (t) => {
      t.integer('cached_tokens').notNullable().defaultTo(0);
    });
    await knex.schema.alterTable('llm_usage_daily', (t) => {
      t.bigInteger('cached_tokens').notNullable().defaultTo(0);
    });
  },
  async down(knex) {
    await knex.schema.alterTable('llm_usage_daily', (t) => {
      t.dropColumn('cached_tokens');
    });
    await knex.schema.alterTable('llm_usage', (t) => {
      t.dropColumn('cached_tokens');
    });
  },
};

/**
 * In-flight slots as leases, and settlement once per request (budgets-store.ts, `admitSpend`):
 * each counter keeps its holds in two generations (`in_flight`, `in_flight_prev`, generation
 * `hold_gen` opened at `gen_started_ms`, the llm-api clock's milliseconds), and each hold is a row
 * that settle deletes. A slot left by a process that died is dropped within a few leases instead
 * of staying counted until its period ends. Existing counters start with a generation opened at
 * 0, so the slots they still count (leaked ones among them) are dropped at their next admission.
 */
export const spendHolds: Migration = {
  name: '20261207_2000_llm_spend_holds',
  async up(knex) {
    await knex.schema.alterTable('llm_spend_counters', (t) => {
      t.integer('in_flight_prev').notNullable().defaultTo(0);
      t.bigInteger('hold_gen').notNullable().defaultTo(0);
      t.bigInteger('gen_started_ms').notNullable().defaultTo(0);
    });
    await knex.schema.createTable('llm_spend_holds', (t) => {
      t.string('scope', 8).notNullable();
      t.string('scope_id', 64).notNullable();
      t.date('period_start').notNullable();
      t.bigInteger('gen').notNullable();
      t.string('id', 64).notNullable();
      t.bigInteger('admitted_ms').notNullable();
      // Settle finds its own hold by the whole key; an admission finds a counter's holds of old generations by its prefix.
      t.primary(['scope', 'scope_id', 'period_start', 'gen', 'id']);
    });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_spend_holds');
    await knex.schema.alterTable('llm_spend_counters', (t) => {
      t.dropColumn('in_flight_prev');
      t.dropColumn('hold_gen');
      t.dropColumn('gen_started_ms');
    });
  },
};

/**
 * The periodic purge of spend holds that never settled (budgets.ts, `purgeStaleHolds`) finds them
 * by age across every counter: without an index on `admitted_ms` each run read the whole table.
 * The table holds only requests in flight (and leftovers the purge removes), so the index stays
 * small; admission writes one more index entry per admitted request under a budget.
 */
export const spendHoldsAdmittedIndex: Migration = {
  name: '20261207_2300_llm_spend_holds_admitted',
  async up(knex) {
    await knex.schema.alterTable('llm_spend_holds', (t) => {
      t.index(['admitted_ms'], 'llm_spend_holds_admitted_ms_index');
    });
  },
  async down(knex) {
    await knex.schema.alterTable('llm_spend_holds', (t) => {
      t.dropIndex(['admitted_ms'], 'llm_spend_holds_admitted_ms_index');
    });
  },
};

/**
 * Each spend hold carries the instant after which its settlement can no longer come
 * (`expires_ms`: the admitting process's longest request, a minute, and the settle retry window),
 * and holds are deleted by that, not by an age each process worked out from its own setting: a
 * process on a shorter `LLM_COMPLETION_MAX_DURATION_MS` (a rolling change that raises it) deleted
 * the holds of requests still running under the longer one, and their cost was then not counted.
 * Holds written without it (before this migration, or by a process not yet upgraded) are kept for
 * a day after their admission (`LEGACY_HOLD_MS` in budgets-store.ts), longer than any lease in use.
 * The purge reads them through an index on that expiry; the index on `admitted_ms` it replaces
 * served nothing else.
 */
export const spendHoldExpiry: Migration = {
  name: '20261207_2330_llm_spend_holds_expiry',
  async up(knex) {
    await knex.schema.alterTable('llm_spend_holds', (t) => {
      t.bigInteger('expires_ms').nullable();
    });
    await knex.raw('create index llm_spend_holds_expiry_index on llm_spend_holds ((coalesce(expires_ms, admitted_ms + 86400000)))');
    await knex.raw('drop index if exists llm_spend_holds_admitted_ms_index');
  },
  async down(knex) {
    await knex.schema.alterTable('llm_spend_holds', (t) => {
      t.index(['admitted_ms'], 'llm_spend_holds_admitted_ms_index');
    });
    await knex.raw('drop index llm_spend_holds_expiry_index');
    await knex.schema.alterTable('llm_spend_holds', (t) => {
      t.dropColumn('expires_ms');
    });
  },
};

/**
 * The periodic purge deletes spend counters of periods long over (budgets.ts, `purgeOldCounters`)
 * and finds them by their period's start, oldest first: the primary key leads with the scope, so
 * without this index each run read the whole table. Admission updates a counter without touching
 * `period_start`, so those updates stay as cheap; a new counter (once per key or user and period)
 * writes one more index entry.
 */
export const spendCountersPeriodIndex: Migration = {
  name: '20261208_0040_llm_spend_counters_period',
  async up(knex) {
    await knex.raw('create index llm_spend_counters_period_start_index on llm_spend_counters (period_start)');
  },
  async down(knex) {
    await knex.raw('drop index llm_spend_counters_period_start_index');
  },
};
