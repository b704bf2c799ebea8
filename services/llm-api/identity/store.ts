import type { Knex } from 'knex';
import { createUsersStore, type Page } from '../../kit/index.js';

/** The users table as identity sees it: the kit's columns plus email_verified and full_name. */
export interface UserRecord {
  id: string;
  issuer: string;
  subject: string;
  email: string | null;
  username: string | null;
  full_name: string | null;
  email_verified: boolean;
  is_admin: boolean;
  is_guest: boolean;
  disabled: boolean;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = ['id', 'issuer', 'subject', 'email', 'username', 'full_name', 'email_verified', 'is_admin', 'is_guest', 'disabled', 'created_at', 'updated_at'];

export type UserPatch = Partial<Pick<UserRecord, 'email' | 'username' | 'full_name' | 'email_verified' | 'is_admin' | 'is_guest' | 'disabled'>>;

/** The kit's users store with identity's columns, plus the queries only identity needs. */
export function createIdentityUsersStore(knex: Knex) {
  const core = createUsersStore<UserRecord>(knex, COLUMNS);
  return {
    knex,
    byId: core.byId,
    byIssuerSubject: core.byIssuerSubject,
    ensureExternal: core.ensureExternal,
    /** Reads and locks the row for the rest of the transaction. */
    lock(db: Knex, id: string): Promise<UserRecord | undefined> {
      return db('users').select(COLUMNS).where({ id }).forUpdate().first();
    },
    async insert(db: Knex, row: Pick<UserRecord, 'id' | 'issuer' | 'subject' | 'email' | 'username' | 'is_guest'> & Partial<UserRecord>): Promise<UserRecord> {
      const [inserted] = await db('users').insert(row).returning(COLUMNS);
      return inserted as UserRecord;
    },
    async update(db: Knex, id: string, patch: UserPatch): Promise<UserRecord | undefined> {
      const [row] = await db('users').where({ id }).update({ ...patch, updated_at: db.fn.now() }).returning(COLUMNS);
      return row as UserRecord | undefined;
    },
    /** Another user already holding this e-mail or username (case-insensitive). */
    async taken(db: Knex, field: 'email' | 'username', value: string, exceptId: string): Promise<boolean> {
      const row = await db('users').whereRaw(`lower(${field}) = lower(?)`, [value]).whereNot({ id: exceptId }).first('id');
      return row !== undefined;
    },
    /** Serialises claims on one e-mail/username across concurrent upgrades. */
    async lockName(db: Knex, value: string): Promise<void> {
      await db.raw('select pg_advisory_xact_lock(hashtext(?))', [`identity:name:${value.toLowerCase()}`]);
    },
    /**
     * Serialises the changes that take an active administrator away (demote, disable), so two
     * administrators demoting each other at once cannot leave the platform without one.
     */
    async lockAdmins(db: Knex): Promise<void> {
      await db.raw('select pg_advisory_xact_lock(hashtext(?))', ['identity:admins']);
    },
    /** How many enabled administrators there are besides `exceptId`. */
    async otherActiveAdmins(db: Knex, exceptId: string): Promise<number> {
      const [{ count }] = (await db('users').where({ is_admin: true, disabled: false }).whereNot({ id: exceptId }).count<{ count: number }[]>({ count: '*' })) as { count: number }[];
      return Number(count);
    },
    async list(page: Page, filter: { email?: string; isGuest?: boolean; isAdmin?: boolean; disabled?: boolean }): Promise<{ rows: UserRecord[]; total: number }> {
      const base = knex('users').where((q) => {
        if (filter.email) q.whereRaw('lower(email) = lower(?)', [filter.email]);
        if (filter.isGuest !== undefined) q.where({ is_guest: filter.isGuest });
        if (filter.isAdmin !== undefined) q.where({ is_admin: filter.isAdmin });
        if (filter.disabled !== undefined) q.where({ disabled: filter.disabled });
      });
      const [{ count }] = (await base.clone().count<{ count: number }[]>({ count: '*' })) as { count: number }[];
      const rows = await base.clone().select(COLUMNS).orderBy('created_at', 'asc').orderBy('id', 'asc').limit(page.limit).offset(page.offset);
      return { rows: rows as UserRecord[], total: Number(count) };
    },
  };
}

export type IdentityUsersStore = ReturnType<typeof createIdentityUsersStore>;

/** The user object of the identity endpoints (never credentials). */
export function userView(user: UserRecord) {
  return {
    id: user.id,
    object: 'user' as const,
    email: user.email,
    username: user.username,
    full_name: user.full_name,
    email_verified: user.email_verified,
    is_guest: user.is_guest,
    is_admin: user.is_admin,
    disabled: user.disabled,
    created_at: Math.floor(new Date(user.created_at).getTime() / 1000),
    updated_at: Math.floor(new Date(user.updated_at).getTime() / 1000),
  };
}
