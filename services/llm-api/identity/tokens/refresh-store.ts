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
    revokeUser(db: Knex, userId: string, now: number): Promise<number> {
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
