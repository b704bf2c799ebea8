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

const CORE_COLUMNS = ['id', 'subject', 'issuer', 'email', 'username', 'is_admin', 'is_guest', 'disabled'] as const;

export function createUsersStore(db: Knex) {
  return {
    byId(id: string): Promise<UserRow | undefined> {
      return db('users').select(CORE_COLUMNS).where({ id }).first();
    },
    byIssuerSubject(issuer: string, subject: string): Promise<UserRow | undefined> {
      return db('users').select(CORE_COLUMNS).where({ issuer, subject }).first();
    },
    /** Creates the row for an external identity on first sight; concurrent first requests converge. */
    async ensureExternal(input: { issuer: string; subject: string; email: string | null; username: string | null }): Promise<UserRow> {
      const inserted = await db('users')
        .insert({ id: newId('user'), ...input })
        .onConflict(['issuer', 'subject'])
        .ignore()
        .returning(CORE_COLUMNS);
      if (inserted[0]) return inserted[0] as UserRow;
      const existing = await this.byIssuerSubject(input.issuer, input.subject);
      if (!existing) throw new Error('user row vanished after conflict');
      return existing;
    },
  };
}

export type UsersStore = ReturnType<typeof createUsersStore>;
