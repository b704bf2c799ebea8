import type { Migration } from '../db/migrate.js';

export const coreTables: Migration = {
  name: '20261122_0001_kit_core',
  async up(knex) {
    await knex.schema.createTable('users', (t) => {
      t.string('id', 64).primary();
      // (issuer, subject) identifies the user at its identity provider; the embedded issuer uses 'platform'.
      t.string('issuer', 256).notNullable().defaultTo('platform');
      t.string('subject', 256).notNullable();
      t.string('email', 320);
      t.string('username', 256);
      t.boolean('is_admin').notNullable().defaultTo(false);
      t.boolean('is_guest').notNullable().defaultTo(false);
      t.boolean('disabled').notNullable().defaultTo(false);
      t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      t.unique(['issuer', 'subject']);
    });

    // Domain events, written in the same transaction as the change that causes them.
    await knex.schema.createTable('outbox_events', (t) => {
      t.string('id', 64).primary(); // evt_…
      t.string('type', 128).notNullable();
      t.jsonb('data').notNullable();
      t.timestamp('occurred_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      t.bigInteger('seq').notNullable();
      t.bigInteger('locked_until').notNullable().defaultTo(0); // ms since epoch, from the relay's clock
      t.integer('attempts').notNullable().defaultTo(0);
      t.timestamp('published_at', { useTz: true });
    });
    await knex.raw('create sequence outbox_events_seq');
    await knex.raw("alter table outbox_events alter column seq set default nextval('outbox_events_seq')");
    await knex.raw('create index outbox_events_pending on outbox_events (seq) where published_at is null');

    // The embedded bus: a topic exchange emulated by bindings, and durable jobs claimed with SKIP LOCKED.
    await knex.schema.createTable('bus_bindings', (t) => {
      t.string('exchange', 128).notNullable();
      t.string('queue', 256).notNullable();
      t.string('pattern', 256).notNullable();
      t.primary(['exchange', 'queue', 'pattern']);
    });
    await knex.schema.createTable('bus_jobs', (t) => {
      t.bigIncrements('id');
      t.string('queue', 256).notNullable();
      t.string('message_id', 128).notNullable();
      t.string('routing_key', 256).notNullable();
      t.jsonb('body').notNullable();
      t.jsonb('headers').notNullable().defaultTo('{}');
      t.bigInteger('run_at').notNullable(); // ms since epoch
      t.bigInteger('locked_until').notNullable().defaultTo(0);
      t.integer('deliveries').notNullable().defaultTo(0);
      t.string('state', 16).notNullable().defaultTo('ready'); // ready | dead
      t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    });
    await knex.raw("create index bus_jobs_ready on bus_jobs (queue, run_at, id) where state = 'ready'");
  },
  async down(knex) {
    await knex.schema.dropTable('bus_jobs');
    await knex.schema.dropTable('bus_bindings');
    await knex.schema.dropTable('outbox_events');
    await knex.raw('drop sequence if exists outbox_events_seq');
    await knex.schema.dropTable('users');
  },
};
