import type { Knex } from 'knex';
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
  {
    // An mcp tool's `authorization` and `headers` (credentials for another server) were once taken
    // and kept with the response's `tools`, so a retrieve or a stream replay served them back until
    // the retention purge. They are removed from the stored responses and from their kept events.
    // No down: the credentials are gone.
    name: '20261207_2350_responses_mcp_credentials_removed',
    up: removeMcpCredentials,
  },
];

/** Rows read per statement: each statement of the migration touches at most this many. */
const PAGE = 500;
const CREDENTIAL_KEYS = ['authorization', 'headers'];
/** A stored body with an mcp tool that carries either key (a jsonpath, given as a binding: knex reads `?` as one). */
const STORED_CREDENTIAL = '$.tools[*] ? (@.type == "mcp" && (exists(@.authorization) || exists(@.headers)))';

async function removeMcpCredentials(knex: Knex): Promise<void> {
  let last = '';
  for (;;) {
    const result = await knex.raw(
      `with page as (select id from responses where id > ? order by id limit ${PAGE}),
       fixed as (
         update responses r
            set body = jsonb_set(r.body, '{tools}', (
              select jsonb_agg(case when t.e->>'type' = 'mcp' then t.e - 'authorization' - 'headers' else t.e end order by t.i)
              from jsonb_array_elements(r.body->'tools') with ordinality as t(e, i)))
           from page
          where r.id = page.id
            and jsonb_typeof(r.body->'tools') = 'array'
            and jsonb_path_exists(r.body, ?::jsonpath)
          returning r.id)
       select (select max(id) from page) as last, (select count(*) from fixed) as fixed`,
      [last, STORED_CREDENTIAL],
    );
    const next = (result.rows[0] as { last: string | null }).last;
    if (next === null) break;
    last = next;
  }

  // A kept event's `data` is the JSON text replayed as it was streamed: it is rewritten the way it
  // was written (JSON.stringify), only where an event's response carries such a tool. Only the
  // candidates' text is read; the key is the primary key, so each page is one index range.
  let after: { response_id: string; sequence_number: number } = { response_id: '', sequence_number: -1 };
  for (;;) {
    const result = await knex.raw(
      `select response_id, sequence_number,
              case when data like '%"type":"mcp"%' and (data like '%"authorization"%' or data like '%"headers"%') then data end as data
         from response_events
        where (response_id, sequence_number) > (?, ?)
        order by response_id, sequence_number
        limit ${PAGE}`,
      [after.response_id, after.sequence_number],
    );
    const rows = result.rows as Array<{ response_id: string; sequence_number: number; data: string | null }>;
    if (rows.length === 0) break;
    for (const row of rows) {
      if (row.data === null) continue;
      const cleaned = withoutMcpCredentials(row.data);
      if (cleaned !== null) await knex('response_events').where({ response_id: row.response_id, sequence_number: row.sequence_number }).update({ data: cleaned });
    }
    after = rows[rows.length - 1]!;
  }
}

/** The event's JSON without the credentials of its response's mcp tools; null when it has none (or is not JSON: left as it is). */
function withoutMcpCredentials(data: string): string | null {
  let event: any;
  try {
    event = JSON.parse(data);
  } catch {
    return null;
  }
  const tools = event?.response?.tools;
  if (!Array.isArray(tools)) return null;
  let changed = false;
  for (const tool of tools) {
    if (!tool || typeof tool !== 'object' || tool.type !== 'mcp') continue;
    for (const key of CREDENTIAL_KEYS) {
      if (key in tool) {
        delete tool[key];
        changed = true;
      }
    }
  }
  return changed ? JSON.stringify(event) : null;
}
