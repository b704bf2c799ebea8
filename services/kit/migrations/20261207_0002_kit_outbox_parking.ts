import type { Migration } from '../db/migrate.js';

/**
 * Outbox rows the bus refuses for good (outbox/outbox.ts): `publish_failures` counts the refusals of
 * a row (a broker away is not counted), `dead_at` is set when the row is parked after
 * OUTBOX_PUBLISH_ATTEMPTS of them. The relay's pending index leaves parked rows out.
 */
export const outboxParking: Migration = {
  name: '20261207_0002_kit_outbox_parking',
  async up(knex) {
    await knex.schema.alterTable('outbox_events', (t) => {
      t.integer('publish_failures').notNullable().defaultTo(0);
      t.timestamp('dead_at', { useTz: true });
    });
    await knex.raw('drop index if exists outbox_events_pending');
    await knex.raw('create index outbox_events_pending on outbox_events (seq) where published_at is null and dead_at is null');
    await knex.raw('create index outbox_events_dead on outbox_events (seq) where dead_at is not null');
  },
  async down(knex) {
    await knex.raw('drop index if exists outbox_events_dead');
    await knex.raw('drop index if exists outbox_events_pending');
    await knex.schema.alterTable('outbox_events', (t) => {
      t.dropColumn('dead_at');
      t.dropColumn('publish_failures');
    });
    await knex.raw('create index outbox_events_pending on outbox_events (seq) where published_at is null');
  },
};
