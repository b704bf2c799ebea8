import type { Knex } from 'knex';
import { newId } from '../ids.js';

/** The shared users table (kit migration 001). Identity (issue 4) adds columns; this reads the core. */
export interface UserRow {
  id: string;
  subject: string;
  issuer: string;
  email: string | null;
  username: string | null;
  is_admin: boolean;
  is_guest: boolean;
  disabled: boolean;
}

const CORE_COLUMNS: readonly string[] = ['id', 'subject', 'issuer', 'email', 'username', 'is_admin', 'is_guest', 'disabled'];

/** The users table's bounds (kit migration 001): `subject` 256, `email` 320, `username` 256 characters. */
export const USER_SUBJECT_MAX = 256;
const EMAIL_MAX = 320;
const USERNAME_MAX = 256;

/**
 * An external issuer's claim that does not fit its column is not stored (the principal still
 * carries it from the edge's header): the insert would fail, and with it every request of that user.
 */
const fitting = (value: string | null, max: number): string | null => (value !== null && value.length <= max ? value : null);

/**
 * Reads of the shared users table. A service that added columns (llm-api's identity) passes its
 * row type and column list and builds its own queries on top, instead of writing these again.
 */
export function createUsersStore<Row extends UserRow = UserRow>(db: Knex, columns: readonly string[] = CORE_COLUMNS) {
  const select = [...columns];
  const byIssuerSubject = (issuer: string, subject: string): Promise<Row | undefined> => db('users').select(select).where({ issuer, subject }).first();
  return {
    /** `trx`: read inside the caller's transaction. */
    byId(id: string, trx: Knex = db): Promise<Row | undefined> {
      return trx('users').select(select).where({ id }).first();
    },
    byIssuerSubject,
    /** Creates the row for an external identity on first sight; concurrent first requests converge. */
    async ensureExternal(input: { issuer: string; subject: string; email: string | null; username: string | null }): Promise<Row> {
      const inserted = await db('users')
        .insert({ id: newId('user'), ...input, email: fitting(input.email, EMAIL_MAX), username: fitting(input.username, USERNAME_MAX) })
        .onConflict(['issuer', 'subject'])
        .ignore()
        .returning(select);
      if (inserted[0]) return inserted[0] as Row;
      const existing = await byIssuerSubject(input.issuer, input.subject);
      if (!existing) throw new Error('user row vanished after conflict');
      return existing as Row;
    },
  };
}

export type UsersStore = ReturnType<typeof createUsersStore>;
