import type { Knex } from 'knex';

/**
 * The lockout state of one e-mail address (times are Clock milliseconds). Every sign-in attempt
 * takes the next number of `attempts` before its password is checked; the attempts numbered above
 * `counted_from` count toward the lock (those still being checked and those that failed).
 */
export interface LoginAttempts {
  attempts: number;
  counted_from: number;
  locked_until: number | null;
  updated_at: number;
}

/** What a decision made under the row lock writes (`state`; nothing when absent) and answers (`result`). */
export interface AttemptsChange<T> {
  state?: LoginAttempts;
  result: T;
}

const ATTEMPT_COLUMNS = ['attempts', 'counted_from', 'locked_until', 'updated_at'] as const;

/** bigint columns arrive as strings from PostgreSQL. */
const asAttempts = (row: { attempts: unknown; counted_from: unknown; locked_until: unknown; updated_at: unknown }): LoginAttempts => ({
  attempts: Number(row.attempts),
  counted_from: Number(row.counted_from),
  locked_until: row.locked_until === null ? null : Number(row.locked_until),
  updated_at: Number(row.updated_at),
});

/** The row as stored: `failures` is kept equal to the attempts that count, for whoever reads the table. */
const asRow = (state: LoginAttempts) => ({
  attempts: state.attempts,
  counted_from: state.counted_from,
  failures: state.attempts - state.counted_from,
  locked_until: state.locked_until,
  updated_at: state.updated_at,
});

/** Password hashes and sign-in attempt counters (tables of the `identity_passwords` and `identity_login_reservations` migrations). */
export function createPasswordStore(knex: Knex) {
  return {
    knex,
    /**
     * The user holding this e-mail and its password hash, in one query whether or not either exists.
     * `lowercased` is the address already lowered by the caller (the spelling its lockout counts
     * under): stored addresses are ASCII, so `lower()` of the column is their one spelling.
     */
    async accountByEmail(lowercased: string): Promise<{ user_id: string; disabled: boolean; is_guest: boolean; hash: string | null } | undefined> {
      return knex('users as u')
        .leftJoin('identity_passwords as p', 'p.user_id', 'u.id')
        .whereRaw('lower(u.email) = ?', [lowercased])
        .orderBy('u.created_at', 'asc')
        .first('u.id as user_id', 'u.disabled', 'u.is_guest', 'p.hash');
    },
    async hashOf(userId: string, db: Knex = knex): Promise<string | undefined> {
      const row = await db('identity_passwords').where({ user_id: userId }).first('hash');
      return row?.hash;
    },
    /** The user's password hash, its row locked until the transaction ends (undefined: none set). */
    async lockedHashOf(trx: Knex, userId: string): Promise<string | undefined> {
      const row = await trx('identity_passwords').where({ user_id: userId }).forUpdate().first('hash');
      return row?.hash;
    },
    /** Stores a first password; false when the user has one already (another request set it first). */
    async insertHashIfNone(db: Knex, userId: string, hash: string, now: number): Promise<boolean> {
      const inserted = await db('identity_passwords').insert({ user_id: userId, hash, updated_at: now }).onConflict('user_id').ignore().returning('user_id');
      return inserted.length > 0;
    },
    async setHash(db: Knex, userId: string, hash: string, now: number): Promise<void> {
      await db('identity_passwords').insert({ user_id: userId, hash, updated_at: now }).onConflict('user_id').merge(['hash', 'updated_at']);
    },
    /**
     * Reads this address's counters under a row lock, so concurrent attempts decide one after the
     * other, and writes the state `decide` returns. With `create`, a missing row is first inserted
     * with that state (concurrent inserts of one address make one row); without it, `decide` sees
     * undefined for a missing row and nothing is inserted.
     */
    async updateAttempts<T>(
      emailKey: string,
      decide: (current: LoginAttempts | undefined) => AttemptsChange<T>,
      options: { create?: LoginAttempts } = {},
    ): Promise<T> {
      return knex.transaction(async (trx) => {
        if (options.create) {
          await trx('identity_login_attempts').insert({ email_key: emailKey, ...asRow(options.create) }).onConflict('email_key').ignore();
        }
        const row = await trx('identity_login_attempts').where({ email_key: emailKey }).forUpdate().first(...ATTEMPT_COLUMNS);
        const { state, result } = decide(row && asAttempts(row));
        if (state && row) await trx('identity_login_attempts').where({ email_key: emailKey }).update(asRow(state));
        return result;
      });
    },
    /**
     * The administrator's reset: every attempt so far written off and the lock lifted, in one
     * statement. The row stays, so the attempt numbers keep growing (an attempt still being checked
     * cannot write off one made after the reset).
     */
    async writeOffAttempts(emailKey: string, db: Knex = knex): Promise<void> {
      await db('identity_login_attempts')
        .where({ email_key: emailKey })
        .update({ counted_from: knex.ref('attempts'), failures: 0, locked_until: null });
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
