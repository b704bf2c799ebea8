import type { Migration } from '../../kit/index.js';

/**
 * The recent-requests log: one row per request llm-api served, kept for REQUEST_LOG_RETENTION_HOURS
 * and at most REQUEST_LOG_MAX_ROWS rows (newest kept). Written in batches off the request path.
 */
export const requestLogTable: Migration = {
  name: '20261123_0400_llm_request_log',
  async up(knex) {
    await knex.schema.createTable('llm_request_log', (t) => {
      t.bigIncrements('id');
      t.string('request_id', 128).notNullable();
      t.string('method', 16).notNullable();
      t.string('path', 2048).notNullable();
      t.string('route', 300);
      t.integer('status').notNullable();
      t.double('duration_ms').notNullable();
      t.boolean('aborted').notNullable().defaultTo(false);
      t.string('auth_method', 16);
      t.string('user_id', 64);
      t.string('api_key_id', 64);
      t.string('model', 300);
      t.string('provider_id', 64);
      t.integer('prompt_tokens');
      t.integer('completion_tokens');
      t.integer('total_tokens');
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.index(['request_id']);
      t.index(['user_id', 'id']);
      t.index(['api_key_id', 'id']);
      t.index(['created_at']);
    });
  },
  async down(knex) {
    await knex.schema.dropTable('llm_request_log');
  },
};
