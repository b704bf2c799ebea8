import type { Knex } from 'knex';

/** The lockout state of one e-mail address (times are Clock milliseconds). */
export interface LoginAttempts {
  failures: number;
  locked_until: number | null;
  updated_at: number;
}

/** bigint columns arrive as strings from PostgreSQL. */
const asAttempts = (row: { failures: number; locked_until: unknown; updated_at: unknown }): LoginAttempts => ({
  failures: Number(row.failures),
  locked_until: row.locked_until === null ? null : Number(row.locked_until),
  updated_at: Number(row.updated_at),
});

/** Password hashes and failed-sign-in counters (tables of the `identity_passwords` migration). */
export function createPasswordStore(knex: Knex) {
  return {
    knex,
    /** The user holding this e-mail (case-insensitive) and its password hash, in one query whether or not either exists. */
    async accountByEmail(email: string): Promise<{ user_id: string; disabled: boolean; is_guest: boolean; hash: string | null } | undefined> {
      return knex('users as u')
        .leftJoin('identity_passwords as p', 'p.user_id', 'u.id')
        .whereRaw('lower(u.email) = lower(?)', [email])
        .orderBy('u.created_at', 'asc')
        .first('u.id as user_id', 'u.disabled', 'u.is_guest', 'p.hash');
    },
    async hashOf(userId: string, db: Knex = knex): Promise<string | undefined> {
      const row = await db('identity_passwords').where({ user_id: userId }).first('hash');
      return row?.hash;
    },
    async setHash(db: Knex, userId: string, hash: string, now: number): Promise<void> {
      await db('identity_passwords').insert({ user_id: userId, hash, updated_at: now }).onConflict('user_id').merge(['hash', 'updated_at']);
    },
    async attempts(emailKey: string): Promise<LoginAttempts | undefined> {
      const row = await knex('identity_login_attempts').where({ email_key: emailKey }).first('failures', 'locked_until', 'updated_at');
      return row && asAttempts(row);
    },
    /**
     * One more failure for this address, under a row lock (concurrent failures all count). `next`
     * computes the new state from the current one (undefined: none yet).
     */
    async recordFailure(emailKey: string, next: (current: LoginAttempts | undefined) => LoginAttempts): Promise<LoginAttempts> {
      return knex.transaction(async (trx) => {
        const current = await trx('identity_login_attempts').where({ email_key: emailKey }).forUpdate().first('failures', 'locked_until', 'updated_at');
        const state = next(current && asAttempts(current));
        await trx('identity_login_attempts').insert({ email_key: emailKey, ...state }).onConflict('email_key').merge(['failures', 'locked_until', 'updated_at']);
        return state;
      });
    },
    async clearAttempts(emailKey: string, db: Knex = knex): Promise<void> {
      await db('identity_login_attempts').where({ email_key: emailKey }).delete();
    },
    /** Drops counters that no longer matter: not locked, and idle for longer than the window. */
    prune(now: number, idleMs: number): Promise<number> {
      return knex('identity_login_attempts')
        .where((q) => q.whereNull('locked_until').orWhere('locked_until', '<=', now))
        .where('updated_at', '<', now - idleMs)
        .delete();
    },
  };
}

export type PasswordStore = ReturnType<typeof createPasswordStore>;
