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

/** Soft delete: the row stays stored, marked deleted at `now` (every later lookup skips it). */
export async function softDeleteConversation(db: Db, id: string, now: number): Promise<void> {
  await db('conversations').where({ id }).update({ deleted_at: now, updated_at: now });
}

/** Clears every remaining link to a project, soft-deleted conversations included. */
export async function clearProjectLinks(db: Db, projectId: string): Promise<void> {
  await db('conversations').where('project_id', projectId).update({ project_id: null });
}

/**
 * Erases up to `batchSize` conversations deleted at or before `cutoff`, with their branches and
 * items, in one transaction; returns how many. The batch is claimed with `FOR UPDATE SKIP LOCKED`,
 * so concurrent callers (several processes) never work on the same conversation nor wait on each other.
 */
export async function purgeDeletedBatch(db: Db, cutoff: number, batchSize: number): Promise<number> {
  return db.transaction(async (trx) => {
    const ids: string[] = await trx('conversations')
      .whereNotNull('deleted_at')
      .where('deleted_at', '<=', cutoff)
      .orderBy('deleted_at', 'asc')
      .limit(batchSize)
      .forUpdate()
      .skipLocked()
      .pluck('id');
    if (ids.length === 0) return 0;
    const branches = trx('conversation_branches').select('id').whereIn('conversation_id', ids);
    await trx('branch_items').whereIn('branch_id', branches).delete();
    await trx('conversation_branches').whereIn('conversation_id', ids).delete();
    await trx('conversation_items').whereIn('conversation_id', ids).delete();
    await trx('conversations').whereIn('id', ids).delete();
    return ids.length;
  });
}
