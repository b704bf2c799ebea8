import type { Knex } from 'knex';

/** Queries of the projects table; nothing here knows about HTTP. */
export interface ProjectRow {
  id: string;
  user_id: string;
  name: string;
  instruction: string | null;
  is_archived: boolean;
  is_favorite: boolean;
  archived_at: number | null;
  created_at: number;
  updated_at: number;
  deleted_at: number | null;
  activity_seq: number;
}

export type Db = Knex | Knex.Transaction;

export interface ProjectFilter {
  userId: string;
  isArchived?: boolean;
  isFavorite?: boolean;
}

export async function insertProject(db: Db, row: Omit<ProjectRow, 'activity_seq' | 'deleted_at'>): Promise<ProjectRow> {
  const [created] = await db<ProjectRow>('projects').insert(row).returning('*');
  return created as ProjectRow;
}

/**
 * The caller's live project, or undefined. `lock`: `update` for changes to the project itself,
 * `share` while linking a conversation to it (so a concurrent delete cannot slip between).
 */
export async function findProject(db: Db, id: string, userId: string, lock?: 'update' | 'share'): Promise<ProjectRow | undefined> {
  const query = db<ProjectRow>('projects').where({ id, user_id: userId }).whereNull('deleted_at').first();
  if (lock === 'update') query.forUpdate();
  if (lock === 'share') query.forShare();
  return (await query) as ProjectRow | undefined;
}

export async function updateProject(db: Db, id: string, patch: Partial<ProjectRow>): Promise<ProjectRow> {
  const [row] = await db<ProjectRow>('projects')
    .where({ id })
    .update({ ...patch, activity_seq: db.raw("nextval('projects_activity_seq')") as unknown as number })
    .returning('*');
  return row as ProjectRow;
}

function filtered(db: Db, filter: ProjectFilter) {
  const query = db<ProjectRow>('projects').where('user_id', filter.userId).whereNull('deleted_at');
  if (filter.isArchived !== undefined) query.where('is_archived', filter.isArchived);
  if (filter.isFavorite !== undefined) query.where('is_favorite', filter.isFavorite);
  return query;
}

/** The page query (exported so the index test can EXPLAIN exactly what runs). */
export function projectPageQuery(db: Db, filter: ProjectFilter, page: { limit: number; offset: number }) {
  return filtered(db, filter).select('*').orderBy('activity_seq', 'desc').limit(page.limit).offset(page.offset);
}

export async function countProjects(db: Db, filter: ProjectFilter): Promise<number> {
  const row = (await filtered(db, filter).count<{ count: number | string }[]>({ count: '*' }))[0];
  return Number(row?.count ?? 0);
}
