import type { Migration } from '../../services/kit/index.js';

/**
 * The model catalog (one entry per public model id, which may contain slashes) and provider models
 * (one per provider offering it). `manual_fields` lists fields an admin set by hand: synchronisation
 * leaves them alone. `llm_catalog_state.version` is bumped in every transaction that changes
 * providers or models, so every llm-api process reloads its in-memory registry (see registry.ts).
 */
export const modelsTables: Migration = {
  name: '20261122_3100_llm_models',
  async up(knex) {
    await knex.schema.createTable('llm_model_catalogs', (t) => {
      t.string('id', 64).primary(); // mc_…
      t.string('public_id', 300).notNullable().unique();
      t.string('model_display_name', 300).notNullable();
      t.text('description');
      t.string('family', 120);
      t.text('notes');
      t.string('requires_feature_flag', 120);
      t.string('status', 32).notNullable().defaultTo('init');
      t.boolean('active').notNullable().defaultTo(true);
      t.boolean('experimental').notNullable().defaultTo(false);
      t.boolean('is_moderated').notNullable().defaultTo(false);
      for (const f of ['audio', 'browser', 'embeddings', 'images', 'instruct', 'reasoning', 'tools', 'video']) {
        t.boolean(`supports_${f}`).notNullable().defaultTo(false);
      }
      t.double('context_length');
      t.jsonb('tags').notNullable().defaultTo('[]');
      t.jsonb('extras').notNullable().defaultTo('{}');
      t.jsonb('architecture');
      t.jsonb('supported_parameters');
      t.jsonb('manual_fields').notNullable().defaultTo('[]');
      t.bigInteger('last_synced_at');
      t.bigInteger('created_at').notNullable();
      t.bigInteger('updated_at').notNullable();
    });

    await knex.schema.createTable('llm_provider_models', (t) => {
      t.string('id', 64).primary(); // pmdl_…
      t.string('provider_id', 64).notNullable().references('id').inTable('llm_providers').onDelete('CASCADE');
      t.string('model_catalog_id', 64).notNullable().references('id').inTable('llm_model_catalogs');
      t.string('model_public_id', 300).notNullable();
      t.string('provider_original_model_id', 300).notNullable();
      t.string('provider_vendor', 100).notNullable();
      t.string('category', 32).notNullable().defaultTo('llm');
      t.string('family', 120);
      t.string('model_display_name', 300).notNullable();
      t.string('instruct_model_public_id', 300);
      t.string('owned_by', 200).notNullable();
      t.bigInteger('created').notNullable();
      t.boolean('active').notNullable().defaultTo(true);
      t.boolean('sync_deactivated').notNullable().defaultTo(false);
      for (const f of ['audio', 'embeddings', 'images', 'instruct', 'reasoning', 'video']) {
        t.boolean(`supports_${f}`).notNullable().defaultTo(false);
      }
      t.integer('category_order_number').notNullable().defaultTo(0);
      t.integer('model_order_number').notNullable().defaultTo(0);
      t.jsonb('pricing').notNullable().defaultTo('{"lines":[]}');
      t.jsonb('token_limits').notNullable().defaultTo('{}');
      t.jsonb('manual_fields').notNullable().defaultTo('[]');
      t.bigInteger('created_at').notNullable();
      t.bigInteger('updated_at').notNullable();
      t.unique(['provider_id', 'provider_original_model_id']);
      t.index(['model_public_id']);
    });

    await knex.schema.createTable('llm_catalog_state', (t) => {
      t.integer('id').primary();
      t.bigInteger('version').notNullable();
    });
    await knex('llm_catalog_state').insert({ id: 1, version: 1 });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_catalog_state');
    await knex.schema.dropTable('llm_provider_models');
    await knex.schema.dropTable('llm_model_catalogs');
  },
};
