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
