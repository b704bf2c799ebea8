import type { Knex } from 'knex';
import type { Limits, Tier } from './tiers.js';

export interface ApiKeyRow {
  id: string;
  user_id: string;
  name: string;
  key_hash: string;
  prefix: string;
  last_four: string;
  tier: Tier;
  limits: Partial<Limits> | null;
  created_at: number;
  last_used_at: number | null;
  expires_at: number | null;
}

/** A key joined with its user, as the validation path reads it (one query, whatever the outcome). */
export interface ValidationRow extends ApiKeyRow {
  issuer: string;
  subject: string;
  email: string | null;
  username: string | null;
  is_admin: boolean;
  disabled: boolean;
}

const KEY_COLUMNS = ['id', 'user_id', 'name', 'key_hash', 'prefix', 'last_four', 'tier', 'limits', 'created_at', 'last_used_at', 'expires_at'];

export function createApiKeyStore(knex: Knex) {
  const active = (db: Knex, now: number) =>
    db('identity_api_keys').where((q) => q.whereNull('expires_at').orWhere('expires_at', '>', now));

  return {
    knex,
    insert(db: Knex, row: ApiKeyRow): Promise<unknown> {
      return db('identity_api_keys').insert({ ...row, limits: row.limits === null ? null : JSON.stringify(row.limits) });
    },
    countActive(db: Knex, userId: string, now: number): Promise<number> {
      return active(db, now)
        .where({ user_id: userId })
        .count<{ count: number }[]>({ count: '*' })
        .then((rows) => Number(rows[0]?.count ?? 0));
    },
    listActive(userId: string | undefined, now: number, page?: { limit: number; offset: number }): Promise<ApiKeyRow[]> {
      const q = active(knex, now).select(KEY_COLUMNS).orderBy('created_at', 'asc').orderBy('id', 'asc');
      if (userId) q.where({ user_id: userId });
      if (page) q.limit(page.limit).offset(page.offset);
      return q;
    },
    async countAll(userId: string | undefined, now: number): Promise<number> {
      const q = active(knex, now);
      if (userId) q.where({ user_id: userId });
      const rows = await q.count<{ count: number }[]>({ count: '*' });
      return Number(rows[0]?.count ?? 0);
    },
    byId(id: string, db: Knex = knex): Promise<ApiKeyRow | undefined> {
      return db('identity_api_keys').select(KEY_COLUMNS).where({ id }).first();
    },
    byHash(hash: string, db: Knex = knex): Promise<ApiKeyRow | undefined> {
      return db('identity_api_keys').select(KEY_COLUMNS).where({ key_hash: hash }).first();
    },
    /** Deletes the key if it belongs to `userId` (any user when undefined); returns the deleted row. */
    async delete(db: Knex, id: string, userId?: string): Promise<ApiKeyRow | undefined> {
      const q = db('identity_api_keys').where({ id });
      if (userId) q.where({ user_id: userId });
      const [row] = await q.delete().returning(KEY_COLUMNS);
      return row as ApiKeyRow | undefined;
    },
    async deleteAllOf(db: Knex, userId: string): Promise<ApiKeyRow[]> {
      return (await db('identity_api_keys').where({ user_id: userId }).delete().returning(KEY_COLUMNS)) as ApiKeyRow[];
    },
    async deleteExpired(now: number, max: number): Promise<ApiKeyRow[]> {
      const ids = knex('identity_api_keys').select('id').whereNotNull('expires_at').where('expires_at', '<=', now).limit(max);
      return (await knex('identity_api_keys').whereIn('id', ids).delete().returning(KEY_COLUMNS)) as ApiKeyRow[];
    },
    async update(db: Knex, id: string, patch: { tier?: Tier; limits?: Partial<Limits> | null }): Promise<ApiKeyRow | undefined> {
      const values: Record<string, unknown> = {};
      if (patch.tier !== undefined) values.tier = patch.tier;
      if (patch.limits !== undefined) values.limits = patch.limits === null ? null : JSON.stringify(patch.limits);
      // Nothing of the key's own to change (e.g. only its budget): read it, so a missing key is still a 404.
      if (Object.keys(values).length === 0) return (await db('identity_api_keys').where({ id }).first(KEY_COLUMNS)) as ApiKeyRow | undefined;
      const [row] = await db('identity_api_keys').where({ id }).update(values).returning(KEY_COLUMNS);
      return row as ApiKeyRow | undefined;
    },
    /** The key never expires any more (the bootstrap admin's key). */
    async clearExpiry(db: Knex, id: string): Promise<void> {
      await db('identity_api_keys').where({ id }).update({ expires_at: null });
    },
    /** Serialises concurrent starts that make sure the bootstrap admin exists (until the transaction ends). */
    async lockBootstrapAdmin(db: Knex): Promise<void> {
      await db.raw('select pg_advisory_xact_lock(hashtext(?))', ['identity:bootstrap-admin']);
    },
    /** The validation lookup: same statement for every key, found or not. */
    forValidation(hash: string): Promise<ValidationRow | undefined> {
      return knex('identity_api_keys as k')
        .leftJoin('users as u', 'u.id', 'k.user_id')
        .select([...KEY_COLUMNS.map((c) => `k.${c}`), 'u.issuer', 'u.subject', 'u.email', 'u.username', 'u.is_admin', 'u.disabled'])
        .where('k.key_hash', hash)
        .first();
    },
    touch(id: string, now: number, olderThan: number): Promise<number> {
      return knex('identity_api_keys')
        .where({ id })
        .where((q) => q.whereNull('last_used_at').orWhere('last_used_at', '<', olderThan))
        .update({ last_used_at: now });
    },
  };
}

export type ApiKeyStore = ReturnType<typeof createApiKeyStore>;
