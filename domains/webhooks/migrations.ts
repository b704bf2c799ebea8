import type { Migration, MigrationSet } from '../../services/kit/index.js';

/**
 * Subscriptions, one delivery per (event, subscription), and every attempt made. One history
 * (`migrations_webhooks`) shared by llm-api and the delivery worker, so whichever starts first
 * creates the tables and a worker started alone finds them.
 */
const tables: Migration = {
  name: '20261122_4000_webhooks_tables',
  async up(knex) {
    await knex.schema.createTable('webhooks', (t) => {
      t.string('id', 64).primary(); // wh_…
      t.text('url').notNullable();
      t.jsonb('events').notNullable();
      t.boolean('active').notNullable().defaultTo(true);
      t.jsonb('headers').notNullable().defaultTo('{}');
      // Secrets are sealed with the kit's secret box (AES-256-GCM, bound to the webhook id).
      t.text('secret_sealed').notNullable();
      t.text('previous_secret_sealed');
      t.timestamp('previous_secret_expires_at', { useTz: true });
      t.string('created_by', 64);
      t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    });
    await knex.raw('create index webhooks_active on webhooks (created_at) where active');

    await knex.schema.createTable('webhook_deliveries', (t) => {
      t.string('id', 64).primary(); // whd_…
      t.string('webhook_id', 64).notNullable().references('webhooks.id').onDelete('CASCADE');
      t.string('event_id', 64).notNullable();
      t.string('event_type', 128).notNullable();
      t.timestamp('event_occurred_at', { useTz: true }).notNullable();
      t.jsonb('event_data').notNullable();
      t.string('status', 16).notNullable().defaultTo('pending'); // pending | delivered | failed | dead
      t.integer('attempts').notNullable().defaultTo(0); // attempts recorded, over all runs
      t.integer('cycle_attempts').notNullable().defaultTo(0); // attempts in the current run of the schedule
      t.boolean('queued').notNullable().defaultTo(false); // first job handed to the bus
      t.bigInteger('lease_until').notNullable().defaultTo(0); // ms; an attempt is in flight until then
      t.timestamp('next_attempt_at', { useTz: true });
      t.integer('last_status_code');
      t.text('last_error');
      t.timestamp('delivered_at', { useTz: true });
      t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      // Fan-out dedupe: a redelivered event never creates a second delivery for a subscription.
      t.unique(['event_id', 'webhook_id']);
      t.index(['webhook_id', 'created_at']);
    });
    await knex.raw("create index webhook_deliveries_pending on webhook_deliveries (next_attempt_at) where status = 'pending'");

    await knex.schema.createTable('webhook_delivery_attempts', (t) => {
      t.bigIncrements('id');
      t.string('delivery_id', 64).notNullable().references('webhook_deliveries.id').onDelete('CASCADE');
      t.integer('attempt').notNullable(); // 1-based over all runs
      t.integer('retry_count').notNullable(); // the envelope's retry_count
      t.integer('status_code');
      t.integer('duration_ms').notNullable();
      t.string('outcome', 16).notNullable(); // delivered | retry | failed | dead
      t.text('error');
      t.text('response_excerpt');
      t.timestamp('attempted_at', { useTz: true }).notNullable();
      t.timestamp('next_attempt_at', { useTz: true });
      t.unique(['delivery_id', 'attempt']);
    });
  },
  async down(knex) {
    await knex.schema.dropTable('webhook_delivery_attempts');
    await knex.schema.dropTable('webhook_deliveries');
    await knex.schema.dropTable('webhooks');
  },
};

/**
 * When the subscription was committed, in database time (never the application clock), so the
 * fan-out can compare it exactly with an event's `occurred_at` (also database time): a
 * subscription receives only events that occurred at or after it was created.
 */
const subscribedAt: Migration = {
  name: '20261123_4001_webhooks_subscribed_at',
  async up(knex) {
    await knex.schema.alterTable('webhooks', (t) => {
      t.timestamp('subscribed_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    });
    // Existing subscriptions keep the moment they were created.
    await knex('webhooks').update({ subscribed_at: knex.ref('created_at') });
  },
  async down(knex) {
    await knex.schema.alterTable('webhooks', (t) => t.dropColumn('subscribed_at'));
  },
};

/** Metrics count the attempts of the last hour. */
const attemptsByTime: Migration = {
  name: '20261123_4002_webhook_attempts_attempted_at',
  async up(knex) {
    await knex.schema.alterTable('webhook_delivery_attempts', (t) => t.index(['attempted_at'], 'webhook_delivery_attempts_attempted_at'));
  },
  async down(knex) {
    await knex.schema.alterTable('webhook_delivery_attempts', (t) => t.dropIndex(['attempted_at'], 'webhook_delivery_attempts_attempted_at'));
  },
};

/**
 * What the sweep re-enqueued, kept apart from `next_attempt_at` (which stays the time the attempt
 * was due, for the lag metric and the admin API): when it last did (`swept_at`) and how many times
 * since the delivery's last attempt (`sweeps`), so each further re-enqueue waits twice as long.
 * `resweep_after` (null until swept) is the time a swept delivery's next re-enqueue counts its grace
 * period from, as `next_attempt_at` is for one not swept; `sweep_due_at` is the one that applies,
 * computed by the database (so every statement that sets `next_attempt_at` keeps it right), and
 * indexed over pending rows: the sweep reads the oldest due ones from the index and never walks the
 * rows still backing off.
 */
const sweptAt: Migration = {
  name: '20261207_4003_webhook_deliveries_swept_at',
  async up(knex) {
    await knex.schema.alterTable('webhook_deliveries', (t) => {
      t.timestamp('swept_at', { useTz: true });
      t.integer('sweeps').notNullable().defaultTo(0);
      t.timestamp('resweep_after', { useTz: true });
    });
    await knex.raw('alter table webhook_deliveries add column sweep_due_at timestamptz generated always as (coalesce(resweep_after, next_attempt_at)) stored');
    await knex.raw("create index webhook_deliveries_sweep_due on webhook_deliveries (sweep_due_at) where status = 'pending'");
  },
  async down(knex) {
    await knex.raw('drop index if exists webhook_deliveries_sweep_due');
    await knex.raw('alter table webhook_deliveries drop column if exists sweep_due_at');
    await knex.schema.alterTable('webhook_deliveries', (t) => {
      t.dropColumn('resweep_after');
      t.dropColumn('swept_at');
      t.dropColumn('sweeps');
    });
  },
};

/**
 * The hourly retention pass looks for ended deliveries by when they last changed; without this
 * index that is a scan of the whole table, which on a large deployment is most of its rows. Partial
 * over ended rows only, so the pending rows an attempt rewrites over and over never maintain it.
 * The predicate is the one `pruneEndedStatement` spells literally, so the planner can match it.
 */
const endedByUpdatedAt: Migration = {
  name: '20261208_4004_webhook_deliveries_ended_updated_at',
  async up(knex) {
    await knex.raw("create index webhook_deliveries_ended_updated_at on webhook_deliveries (updated_at) where status in ('delivered', 'failed', 'dead')");
  },
  async down(knex) {
    await knex.raw('drop index if exists webhook_deliveries_ended_updated_at');
  },
};

/** Used by llm-api's webhooks resource and by workers/webhook-delivery. */
export const webhooksMigrationSet: MigrationSet = { owner: 'webhooks', migrations: [tables, subscribedAt, attemptsByTime, sweptAt, endedByUpdatedAt] };
