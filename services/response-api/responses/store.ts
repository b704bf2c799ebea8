import type { Knex } from 'knex';
import { TERMINAL_EVENTS } from './event-log.js';
import type { InputItem } from './items.js';

/** SQL of stored responses. Every read is scoped to its owner. */
export interface ResponseRow {
  id: string;
  user_id: string;
  status: string;
  background: boolean;
  cancel_requested: boolean;
  body: Record<string, any>;
  context: unknown[];
  input_items: InputItem[];
  /**
   * The project the response was made in when it belongs to no conversation (named by a platform
   * service's X-Gateway-Project-ID, or inherited along a previous_response_id chain), which a
   * response chained from it inherits; null otherwise.
   */
  project_id?: string | null;
  created_at: Date;
  expires_at: Date;
}

/**
 * JSON for a jsonb column. PostgreSQL's jsonb refuses the escape of U+0000 and of a lone surrogate
 * (`\u0000`, `\ud800`), which a tool's or a model's text may hold: each is stored as U+FFFD
 * instead, in keys and values alike. JSON.stringify escapes nothing else of the kind (a surrogate
 * pair is written as its character), and an escaped backslash (`\\`) is skipped as a whole, so
 * text that only reads `\u0000` is kept as it is.
 */
const UNSTORABLE = /\\u(?:0000|d[89a-f])/;
const json = (value: unknown) => {
  const text = JSON.stringify(value);
  return UNSTORABLE.test(text) ? text.replace(/\\\\|\\u(?:0000|d[89a-f][0-9a-f]{2})/g, (escape) => (escape.length === 2 ? escape : '\\ufffd')) : text;
};

/** A kept event of a background response: `data` is its JSON as it was streamed. */
export interface ResponseEventRow {
  response_id: string;
  sequence_number: number;
  type: string;
  data: string;
  created_at: Date;
}

/**
 * The types of the events that end a response's stream, as SQL literals in the order of the
 * partial index on them (migrations.ts): the planner only uses it for a query that repeats its
 * predicate, which a bound parameter would not.
 */
const TERMINAL_EVENT_SQL = [...TERMINAL_EVENTS].map((type) => `'${type}'`).join(', ');

/** The statuses of a response whose loop has not stored its end. */
export const RUNNING_STATUSES: readonly string[] = ['queued', 'in_progress'];

/** What a response that ended without its loop is stored as (see `endedRow`, ended.ts). */
export interface EndedRow {
  status: string;
  body: Record<string, any>;
  context: unknown[];
}

const storedValues = (row: ResponseRow): any => ({ ...row, body: json(row.body), context: json(row.context), input_items: json(row.input_items) });
const endedValues = (ended: EndedRow): any => ({ status: ended.status, body: json(ended.body), context: json(ended.context) });

export function createResponseStore(knex: Knex) {
  const table = () => knex<ResponseRow>('responses');
  return {
    async insert(row: ResponseRow): Promise<void> {
      await table().insert(storedValues(row));
    },

    /**
     * Writes the current state of a response that is still queued or running. A row that ended
     * meanwhile is kept as it is: a cancel that ended it for a stopped process (`endRunning`),
     * or the sweep (`endStale`), is never overwritten by a loop that turns out to be alive.
     * Whether the row was written (false: it had ended, or was deleted).
     */
    async save(id: string, patch: { status: string; body: Record<string, any>; context?: unknown[] }): Promise<boolean> {
      const values: Record<string, unknown> = { status: patch.status, body: json(patch.body) };
      if (patch.context) values.context = json(patch.context);
      return (await table().where({ id }).whereIn('status', RUNNING_STATUSES).update(values)) > 0;
    },

    async find(userId: string, id: string): Promise<ResponseRow | undefined> {
      return table().where({ id, user_id: userId }).first();
    },

    async remove(userId: string, id: string): Promise<boolean> {
      return (await table().where({ id, user_id: userId }).delete()) > 0;
    },

    async requestCancel(userId: string, id: string): Promise<boolean> {
      return (await table().where({ id, user_id: userId }).update({ cancel_requested: true })) > 0;
    },

    /**
     * Ends one response of its owner that is still queued or running with what `end` makes of its
     * row (its status, its body, its context for chaining): a cancel that found no loop answering,
     * a read that found it older than any loop runs. The row is locked meanwhile, so a loop that
     * writes at the same moment either lands before `end` reads the row or finds it ended (`save`),
     * never in between. Whether it did.
     */
    async endRunning(userId: string, id: string, end: (row: ResponseRow) => EndedRow): Promise<boolean> {
      return knex.transaction(async (trx) => {
        const row = await trx<ResponseRow>('responses').where({ id, user_id: userId }).whereIn('status', RUNNING_STATUSES).forUpdate().first();
        if (!row) return false;
        await trx<ResponseRow>('responses').where({ id }).update(endedValues(end(row)));
        return true;
      });
    },

    async cancelRequested(id: string): Promise<boolean> {
      const row = await table().where({ id }).first('cancel_requested');
      return row ? row.cancel_requested : true; // deleted while running: stop
    },

    /**
     * Ends the responses still queued or running that were created before `createdBefore`, i.e.
     * longer ago than any loop can run (the process that ran them stopped without storing their end:
     * it crashed, or lost the database), each with what `end` makes of its row, `chunk` rows per
     * transaction. A row a live loop is writing at that moment is skipped (the next pass gets it if
     * it is still running). Returns how many.
     */
    async endStale(createdBefore: Date, end: (row: ResponseRow) => EndedRow, chunk = 100): Promise<number> {
      let total = 0;
      for (;;) {
        const ended = await knex.transaction(async (trx) => {
          const rows = await trx<ResponseRow>('responses').whereIn('status', RUNNING_STATUSES).where('created_at', '<', createdBefore).orderBy('created_at').limit(chunk).forUpdate().skipLocked();
          for (const row of rows) await trx<ResponseRow>('responses').where({ id: row.id }).update(endedValues(end(row)));
          return rows.length;
        });
        total += ended;
        if (ended < chunk) return total;
      }
    },

    /**
     * Inserts a background response unless its owner already has `limit` of them still queued or
     * running that were created after `runningSince` (older ones have no loop left: the process
     * running them stopped). A per-owner advisory lock held to the end of the transaction makes the
     * count and the insert one step for every process, so concurrent creates cannot overshoot.
     * Whether it was inserted.
     */
    async insertBackground(row: ResponseRow, limit: number, runningSince: Date): Promise<boolean> {
      return knex.transaction(async (trx) => {
        await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`response_api:background:${row.user_id}`]);
        const counted = await trx<ResponseRow>('responses')
          .where({ user_id: row.user_id, background: true })
          .whereIn('status', RUNNING_STATUSES)
          .where('created_at', '>=', runningSince)
          .count<Array<{ count: string | number }>>('* as count');
        if (Number(counted[0]?.count ?? 0) >= limit) return false;
        await trx<ResponseRow>('responses').insert(storedValues(row));
        return true;
      });
    },

    async purgeExpired(now: Date): Promise<number> {
      return table().where('expires_at', '<=', now).delete();
    },

    /** The status of a response, or undefined once it is gone: a stream that follows its events reads it after each read that found none. */
    async statusOf(userId: string, id: string): Promise<string | undefined> {
      return (await table().where({ id, user_id: userId }).first('status'))?.status;
    },

    /**
     * Keeps a batch of events (one statement). The events of a response deleted meanwhile are
     * skipped (its loop may write a last batch after the delete), and an event already kept (a
     * batch written again after an error) is not kept twice.
     */
    async appendEvents(events: ResponseEventRow[]): Promise<void> {
      if (events.length === 0) return;
      await knex.raw(
        `insert into response_events (response_id, sequence_number, type, data, created_at)
         select e.response_id, e.sequence_number, e.type, e.data, e.created_at
         from jsonb_to_recordset(?::jsonb) as e(response_id text, sequence_number integer, type text, data text, created_at timestamptz)
         where exists (select 1 from responses r where r.id = e.response_id)
         on conflict (response_id, sequence_number) do nothing`,
        [JSON.stringify(events)],
      );
    },

    /** Up to `limit` kept events of a response after `sequence_number` `after`, in order. */
    async eventsAfter(id: string, after: number, limit: number): Promise<Array<Pick<ResponseEventRow, 'sequence_number' | 'type' | 'data'>>> {
      return knex('response_events').where({ response_id: id }).where('sequence_number', '>', after).orderBy('sequence_number').limit(limit).select('sequence_number', 'type', 'data');
    },

    /** The last kept event of a response (undefined: none is kept). */
    async lastEvent(id: string): Promise<Pick<ResponseEventRow, 'sequence_number' | 'type'> | undefined> {
      return knex('response_events').where({ response_id: id }).orderBy('sequence_number', 'desc').first('sequence_number', 'type');
    },

    /**
     * Drops the events of responses that are no longer running and whose terminal event was kept
     * before `before`, `chunk` responses per statement: each statement removes all the events of
     * the responses it picks, so a response's events go all at once, never leaving a stream with a
     * gap. The responses are found through the partial index on the terminal events' `created_at`
     * (its predicate is repeated literally so the planner uses it), not by scanning every event.
     * Events of a response that has none (its process stopped) go with the response.
     * Returns how many events.
     */
    async purgeEndedEvents(before: Date, chunk = 500): Promise<number> {
      let total = 0;
      for (;;) {
        const result = await knex.raw(
          // An array, not a join: the delete then reads the primary key per response, never the table.
          `with gone as (
             delete from response_events e
             where e.response_id = any (array(
               select t.response_id from response_events t
               where t.type in (${TERMINAL_EVENT_SQL}) and t.created_at < ?
                 and not exists (select 1 from responses r where r.id = t.response_id and r.status in (${RUNNING_STATUSES.map(() => '?').join(', ')}))
               limit ?))
             returning e.response_id
           )
           select count(*)::int as events, count(distinct response_id)::int as responses from gone`,
          [before, ...RUNNING_STATUSES, chunk],
        );
        const { events, responses } = result.rows[0] as { events: number; responses: number };
        total += events;
        if (responses < chunk) return total;
      }
    },
  };
}

export type ResponseStore = ReturnType<typeof createResponseStore>;
