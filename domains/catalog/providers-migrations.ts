import type { Migration } from '../../services/kit/index.js';

/** Providers: where requests for a model go. The API key is stored sealed (AES-256-GCM), never in clear. */
export const providersTables: Migration = {
  name: '20261122_3000_llm_providers',
  async up(knex) {
    await knex.schema.createTable('llm_providers', (t) => {
      t.string('id', 64).primary(); // prov_…
      t.string('name', 200).notNullable();
      t.string('vendor', 100).notNullable();
      t.string('category', 16).notNullable().defaultTo('llm');
      t.text('base_url').notNullable();
      t.text('api_key_sealed'); // crypto-box value bound to the provider id
      t.string('api_key_hint', 16); // last 4 characters, for operators
      t.boolean('active').notNullable().defaultTo(true);
      t.boolean('default_provider_image_edit').notNullable().defaultTo(false);
      t.boolean('default_provider_image_generate').notNullable().defaultTo(false);
      t.jsonb('endpoints').notNullable().defaultTo('[]'); // [{url, priority, weight, healthy}]
      t.jsonb('metadata').notNullable().defaultTo('{}');
      t.bigInteger('last_synced_at');
      t.text('last_sync_error');
      t.bigInteger('created_at').notNullable();
      t.bigInteger('updated_at').notNullable();
      t.bigIncrements('seq', { primaryKey: false }); // registration order (routing tie-break)
    });
    await knex.raw('create unique index llm_providers_name on llm_providers (lower(name))');
  },
  async down(knex) {
    await knex.schema.dropTable('llm_providers');
  },
};

/** On-demand synchronisation runs and their outcome (sync-runs-store.ts). */
export const syncRunsTables: Migration = {
  name: '20261123_0400_llm_provider_sync_runs',
  async up(knex) {
    await knex.schema.createTable('llm_provider_sync_runs', (t) => {
      t.string('id', 64).primary(); // psync_…
      t.string('provider_id', 64); // no foreign key: the run outlives a deleted provider
      t.string('status', 16).notNullable();
      t.integer('providers_synced').notNullable().defaultTo(0);
      t.integer('providers_failed').notNullable().defaultTo(0);
      t.integer('added').notNullable().defaultTo(0);
      t.integer('updated').notNullable().defaultTo(0);
      t.integer('deactivated').notNullable().defaultTo(0);
      t.text('error');
      t.jsonb('failures').notNullable().defaultTo('[]');
      t.bigInteger('created_at').notNullable();
      t.bigInteger('started_at');
      t.bigInteger('finished_at');
    });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_provider_sync_runs');
  },
};

/**
 * Which model list a provider's catalog holds: every sync draws a generation from one sequence
 * before it fetches the provider's `/models`, and commits only if no sync with a later generation
 * committed first (`llm_providers.synced_generation`). Two syncs of one provider side by side (two
 * workers, or the admin's sync beside the scheduled one) then never let the list fetched first
 * overwrite the one fetched after it. A sequence, not a clock: a clock set back changes nothing.
 */
export const providerSyncGeneration: Migration = {
  name: '20261207_3001_llm_provider_sync_generation',
  async up(knex) {
    await knex.raw('create sequence llm_provider_sync_generations');
    await knex.schema.alterTable('llm_providers', (t) => {
      t.bigInteger('synced_generation'); // null: never synchronised
    });
  },
  async down(knex) {
    await knex.schema.alterTable('llm_providers', (t) => {
      t.dropColumn('synced_generation');
    });
    await knex.raw('drop sequence if exists llm_provider_sync_generations');
  },
};
