import type { Migration } from '../../kit/index.js';

/**
 * One row per stored response, owned by a user. `body` is the Responses object as the API shows
 * it; `context` is the chat history the loop ended with (what `previous_response_id` continues
 * from); `input_items` is the caller's input as items. `cancel_requested` is the flag a running
 * loop watches, so a cancel sent to any process reaches the process that runs it.
 */
export const responsesMigrations: Migration[] = [
  {
    name: '20261123_1400_responses',
    async up(knex) {
      await knex.schema.createTable('responses', (t) => {
        t.string('id', 64).primary();
        t.string('user_id', 64).notNullable();
        t.string('status', 16).notNullable();
        t.boolean('background').notNullable().defaultTo(false);
        t.boolean('cancel_requested').notNullable().defaultTo(false);
        t.jsonb('body').notNullable();
        t.jsonb('context').notNullable();
        t.jsonb('input_items').notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('expires_at', { useTz: true }).notNullable();
        t.index(['user_id', 'created_at']);
        t.index(['expires_at']);
      });
    },
    async down(knex) {
      await knex.schema.dropTableIfExists('responses');
    },
  },
  {
    // The sweep of responses left running by a stopped process reads only these rows.
    name: '20261201_1200_responses_running_index',
    async up(knex) {
      await knex.raw(`create index responses_running_created_at_index on responses (created_at) where status in ('queued', 'in_progress')`);
    },
    async down(knex) {
      await knex.raw('drop index if exists responses_running_created_at_index');
    },
  },
  {
    // The events of a background response, kept so a client can stream it again from any process
    // (`GET /v1/responses/{id}?stream=true`). `data` is the event's JSON as it was sent, replayed as
    // it is. The cascade removes them with their response (a delete, the retention purge).
    name: '20261207_1200_response_events',
    async up(knex) {
      await knex.schema.createTable('response_events', (t) => {
        t.string('response_id', 64).notNullable().references('id').inTable('responses').onDelete('CASCADE');
        t.integer('sequence_number').notNullable();
        t.string('type', 64).notNullable();
        t.text('data').notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.primary(['response_id', 'sequence_number']);
      });
    },
    async down(knex) {
      await knex.schema.dropTableIfExists('response_events');
    },
  },
  {
    // The purge of kept events finds the responses that ended over an hour ago by their terminal
    // event's time: one row per response in this index, rather than every event in the table.
    name: '20261207_1500_response_events_terminal_index',
    async up(knex) {
      await knex.raw(
        `create index response_events_terminal_created_at_index on response_events (created_at)
         where type in ('response.completed', 'response.failed', 'response.incomplete', 'response.cancelled')`,
      );
    },
    async down(knex) {
      await knex.raw('drop index if exists response_events_terminal_created_at_index');
    },
  },
  {
    // The project a response was made in when it belongs to no conversation (the one a platform
    // service named with X-Gateway-Project-ID): a response chained from it with
    // previous_response_id is made in it too. Null: no project, or the response's conversation
    // names it (its project is read from the conversation when the chain is created).
    name: '20261207_1600_responses_project',
    async up(knex) {
      await knex.schema.alterTable('responses', (t) => {
        t.string('project_id', 64).nullable();
      });
    },
    async down(knex) {
      await knex.schema.alterTable('responses', (t) => {
        t.dropColumn('project_id');
      });
    },
  },
];
