import type { Knex } from 'knex';

/** Queries of the conversations table; nothing here knows about HTTP. */
export type Db = Knex | Knex.Transaction;

export interface ConversationRow {
  id: string;
  user_id: string;
  project_id: string | null;
  title: string | null;
  referrer: string | null;
  metadata: Record<string, string>;
  active_branch: string;
  backup_seq: number;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
  activity_seq: number;
}

export interface ConversationFilter {
  userId: string;
  projectId?: string;
  referrer?: string;
}

const nextActivity = (db: Db) => db.raw("nextval('conversations_activity_seq')") as unknown as number;

export async function insertConversation(
  db: Db,
  row: Pick<ConversationRow, 'id' | 'user_id' | 'project_id' | 'title' | 'referrer' | 'metadata' | 'created_at' | 'updated_at'>,
): Promise<ConversationRow> {
  const [created] = await db<ConversationRow>('conversations')
    .insert({ ...row, metadata: JSON.stringify(row.metadata) as unknown as Record<string, string> })
    .returning('*');
  return created as ConversationRow;
}

/**
 * The caller's live conversation, or undefined. With `lock`, the row is locked FOR UPDATE until the
 * transaction ends: every item append and branch operation takes this lock, so operations on one
 * conversation never interleave.
 */
export async function findConversation(db: Db, id: string, userId: string, lock = false): Promise<ConversationRow | undefined> {
  const query = db<ConversationRow>('conversations').where({ id, user_id: userId }).whereNull('deleted_at').first();
  if (lock) query.forUpdate();
  return (await query) as ConversationRow | undefined;
}

/** Applies `patch`, bumps `updated_at` and the activity order. */
export async function updateConversation(db: Db, id: string, patch: Partial<ConversationRow>, now: number): Promise<ConversationRow> {
  const values: Record<string, unknown> = { ...patch, updated_at: now, activity_seq: nextActivity(db) };
  if (patch.metadata) values.metadata = JSON.stringify(patch.metadata);
  const [row] = await db('conversations').where({ id }).update(values).returning('*');
  return row as ConversationRow;
}

/** Reserves the next backup number of a conversation (caller holds the row lock). */
export async function nextBackupNumber(db: Db, id: string): Promise<number> {
  const [row] = await db('conversations').where({ id }).increment('backup_seq', 1).returning('backup_seq');
  return Number((row as { backup_seq: number }).backup_seq);
}

function filtered(db: Db, filter: ConversationFilter) {
  const query = db<ConversationRow>('conversations').where('user_id', filter.userId).whereNull('deleted_at');
  if (filter.projectId !== undefined) query.where('project_id', filter.projectId);
  if (filter.referrer !== undefined) query.where('referrer', filter.referrer);
  return query;
}

/** The page query, newest activity first (exported so the index test can EXPLAIN exactly what runs). */
export function conversationPageQuery(db: Db, filter: ConversationFilter, page: { limit: number; offset: number }) {
  return filtered(db, filter).select('*').orderBy('activity_seq', 'desc').limit(page.limit).offset(page.offset);
}

export async function countConversations(db: Db, filter: ConversationFilter): Promise<number> {
  const row = (await filtered(db, filter).count<{ count: number | string }[]>({ count: '*' }))[0];
  return Number(row?.count ?? 0);
}

/** Live conversations linked to a project, locked for the unlink that follows. */
export async function lockProjectConversations(db: Db, projectId: string): Promise<ConversationRow[]> {
  return (await db<ConversationRow>('conversations')
    .where('project_id', projectId)
    .whereNull('deleted_at')
    .orderBy('id')
    .forUpdate()) as ConversationRow[];
}
