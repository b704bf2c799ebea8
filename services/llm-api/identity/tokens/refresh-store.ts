import type { Knex } from 'knex';

export interface RefreshRow {
  id: number;
  token_hash: string;
  family_id: string;
  user_id: string;
  created_at: number;
  expires_at: number;
  family_expires_at: number;
  used_at: number | null;
  revoked_at: number | null;
}

/** Refresh tokens, stored only as SHA-256 hashes. */
export function createRefreshStore(knex: Knex) {
  return {
    insert(db: Knex, row: Omit<RefreshRow, 'id' | 'used_at' | 'revoked_at'>): Promise<unknown> {
      return db('identity_refresh_tokens').insert(row);
    },
    /** The user a token belongs to, without a lock (a rotation locks the user row before the token's). */
    async ownerOf(db: Knex, tokenHash: string): Promise<string | undefined> {
      const row = await db('identity_refresh_tokens').where({ token_hash: tokenHash }).first('user_id');
      return row?.user_id;
    },
    /** Takes the user row against rotations (which hold it shared): one running now commits its successor first. */
    async lockUser(db: Knex, userId: string): Promise<void> {
      await db('users').where({ id: userId }).forUpdate().first('id');
    },
    /** Holds the user row against a user-wide revocation until the rotation's successor is committed. */
    async shareUser(db: Knex, userId: string): Promise<void> {
      await db('users').where({ id: userId }).forShare().first('id');
    },
    byHash(db: Knex, tokenHash: string): Promise<RefreshRow | undefined> {
      return db('identity_refresh_tokens').where({ token_hash: tokenHash }).forUpdate().first();
    },
    /** Marks a token used; 0 when someone else used it first (concurrent reuse). */
    markUsed(db: Knex, id: number, now: number): Promise<number> {
      return db('identity_refresh_tokens').where({ id }).whereNull('used_at').update({ used_at: now });
    },
    revokeFamily(db: Knex, familyId: string, now: number): Promise<number> {
      return db('identity_refresh_tokens').where({ family_id: familyId }).whereNull('revoked_at').update({ revoked_at: now });
    },
    /**
     * Revokes every token of the user, the user row locked first: a rotation running meanwhile
     * (it holds the row shared) commits its successor before this runs, so the successor is revoked too.
     */
    async revokeUser(db: Knex, userId: string, now: number): Promise<number> {
      await this.lockUser(db, userId);
      return db('identity_refresh_tokens').where({ user_id: userId }).whereNull('revoked_at').update({ revoked_at: now });
    },
    /** Drops rows no longer useful even for reuse detection (their family has ended). */
    prune(db: Knex, now: number): Promise<number> {
      return db('identity_refresh_tokens').where('family_expires_at', '<', now).delete();
    },
    knex,
  };
}

export type RefreshStore = ReturnType<typeof createRefreshStore>;
