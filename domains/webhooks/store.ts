import type { Knex } from 'knex';
import type { Page } from '../../services/kit/index.js';

/** Webhook subscriptions (knex only; never sees a request). */
export interface WebhookRow {
  id: string;
  url: string;
  events: string[];
  active: boolean;
  /**
   * Custom header names and their values, each value sealed (see header-values.ts); a value not in
   * the sealed format was written in clear by older code, until it is sealed at start.
   */
  headers: Record<string, string>;
  secret_sealed: string;
  previous_secret_sealed: string | null;
  previous_secret_expires_at: Date | null;
  created_by: string | null;
  /**
   * Database time (`clock_timestamp()`) of the insert, or of the update that last made it active again; the fan-out
   * compares events' `occurred_at` with it, so no event that occurred while it was inactive reaches it.
   */
  subscribed_at: Date;
  created_at: Date;
  updated_at: Date;
}

export type WebhookInsert = Pick<WebhookRow, 'id' | 'url' | 'events' | 'active' | 'headers' | 'secret_sealed' | 'created_by'>;
export type WebhookPatch = Partial<Pick<WebhookRow, 'url' | 'events' | 'active' | 'headers' | 'secret_sealed' | 'previous_secret_sealed' | 'previous_secret_expires_at'>> & {
  /**
   * A rotation: the secret that is current when the update runs becomes the previous one, read and
   * written in the same statement (two rotations at once never drop the secret one of them handed out).
   */
  previous_secret_from_current?: boolean;
};

const json = (value: unknown) => JSON.stringify(value);

export function createWebhooksStore(knex: Knex) {
  const table = () => knex<WebhookRow>('webhooks');
  return {
    async insert(row: WebhookInsert, now: Date): Promise<WebhookRow> {
      const [created] = await table()
        // The database's clock at this statement (as events' `occurred_at` is), not the start of a transaction it may be part of.
        .insert({ ...row, events: json(row.events), headers: json(row.headers), subscribed_at: knex.raw('clock_timestamp()'), created_at: now, updated_at: now } as never)
        .returning('*');
      return created as WebhookRow;
    },

    async list(page: Page): Promise<{ rows: WebhookRow[]; total: number }> {
      const [{ count }] = (await table().count<{ count: number }[]>({ count: '*' })) as { count: number }[];
      const rows = await table().select('*').orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).limit(page.limit).offset(page.offset);
      return { rows: rows as WebhookRow[], total: Number(count) };
    },

    async get(id: string): Promise<WebhookRow | undefined> {
      return (await table().where({ id }).first()) as WebhookRow | undefined;
    },

    /**
     * `expect`: update only while the row still has this url and these headers (undefined when
     * either changed since the caller read them, or the row is gone).
     */
    async update(id: string, patch: WebhookPatch, now: Date, expect?: Pick<WebhookRow, 'url' | 'headers'>): Promise<WebhookRow | undefined> {
      const { previous_secret_from_current: fromCurrent, ...fields } = patch;
      const values: Record<string, unknown> = { ...fields, updated_at: now };
      // SET sees the row as it was before this statement: the secret being replaced.
      if (fromCurrent) values.previous_secret_sealed = knex.ref('secret_sealed');
      // Made active again: it subscribes anew from now (database time), like a new subscription, so a
      // lagging fan-out never hands it the events that occurred while it was inactive.
      if (patch.active === true) values.subscribed_at = knex.raw('case when active then subscribed_at else clock_timestamp() end');
      if (patch.events) values.events = json(patch.events);
      if (patch.headers) values.headers = json(patch.headers);
      const query = table().where({ id });
      if (expect) query.andWhere({ url: expect.url }).andWhereRaw('headers = ?::jsonb', [json(expect.headers ?? {})]);
      const [row] = await query.update(values as never).returning('*');
      return row as WebhookRow | undefined;
    },

    /**
     * Subscriptions (by id, after `afterId`) holding a header value that does not match `sealedPattern`
     * (a POSIX regular expression): values written in clear by code from before values were sealed.
     */
    async withPlainHeaders(sealedPattern: string, limit: number, afterId?: string): Promise<Pick<WebhookRow, 'id' | 'headers'>[]> {
      const q = table()
        .whereRaw('exists (select 1 from jsonb_each_text(headers) as h(name, value) where h.value !~ ?)', [sealedPattern])
        .orderBy('id')
        .limit(limit)
        .select('id', 'headers');
      if (afterId !== undefined) q.andWhere('id', '>', afterId);
      return (await q) as Pick<WebhookRow, 'id' | 'headers'>[];
    },

    /** Replaces the headers `expected` by `next`, only if the row still holds exactly `expected`; false otherwise. */
    async replaceHeaders(id: string, expected: Record<string, string>, next: Record<string, string>): Promise<boolean> {
      const n = await table()
        .where({ id })
        .andWhereRaw('headers = ?::jsonb', [json(expected)])
        .update({ headers: json(next) } as never);
      return n > 0;
    },

    async remove(id: string): Promise<boolean> {
      return (await table().where({ id }).delete()) > 0;
    },

    /**
     * Active subscriptions that existed when an event occurred: created (or last made active again)
     * at or before `occurredAt` (an ISO timestamp in database time, microseconds kept), never ones
     * created or reactivated since.
     */
    async activeAt(occurredAt: string): Promise<WebhookRow[]> {
      return (await table().where({ active: true }).andWhere('subscribed_at', '<=', knex.raw('?::timestamptz', [occurredAt])).select('*')) as WebhookRow[];
    },
  };
}

export type WebhooksStore = ReturnType<typeof createWebhooksStore>;
