import type { Knex } from 'knex';
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
  created_at: Date;
  expires_at: Date;
}

const json = (value: unknown) => JSON.stringify(value);

export function createResponseStore(knex: Knex) {
  const table = () => knex<ResponseRow>('responses');
  return {
    async insert(row: ResponseRow): Promise<void> {
      await table().insert({ ...row, body: json(row.body) as any, context: json(row.context) as any, input_items: json(row.input_items) as any });
    },

    /** Writes the current state; never overwrites a row whose cancel already landed as `cancelled`. */
    async save(id: string, patch: { status: string; body: Record<string, any>; context?: unknown[] }): Promise<void> {
      const values: Record<string, unknown> = { status: patch.status, body: json(patch.body) };
      if (patch.context) values.context = json(patch.context);
      await table().where({ id }).update(values);
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

    async cancelRequested(id: string): Promise<boolean> {
      const row = await table().where({ id }).first('cancel_requested');
      return row ? row.cancel_requested : true; // deleted while running: stop
    },

    /** Responses left queued or running by a process that stopped. */
    async markInterrupted(ids: string[], body: (row: ResponseRow) => Record<string, any>): Promise<void> {
      if (ids.length === 0) return;
      const rows = await table().whereIn('id', ids).whereIn('status', ['queued', 'in_progress']);
      for (const row of rows) await table().where({ id: row.id }).update({ status: 'failed', body: json(body(row)) as any });
    },

    async purgeExpired(now: Date): Promise<number> {
      return table().where('expires_at', '<=', now).delete();
    },
  };
}

export type ResponseStore = ReturnType<typeof createResponseStore>;
