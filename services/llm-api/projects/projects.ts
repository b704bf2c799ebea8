import type { Knex } from 'knex';
import { newId, notFound, unixSeconds, type Clock, type Page, listEnvelope, type ListEnvelope } from '../../kit/index.js';
import type { CreateProjectInput, UpdateProjectInput } from './schemas.js';
import { countProjects, findProject, insertProject, projectPageQuery, updateProject, type ProjectFilter, type ProjectRow } from './store.js';

/** Projects domain: ownership, archive/favourite flags, soft delete. */
export interface ProjectDeps {
  knex: Knex;
  clock: Clock;
  /**
   * Unlinks the project's conversations inside the delete's transaction. A port, because the
   * conversations resource owns that table (and itself looks projects up through `findProject`).
   */
  detachConversations(trx: Knex.Transaction, projectId: string): Promise<unknown>;
}

export interface ProjectObject {
  id: string;
  object: 'project';
  name: string;
  instruction: string | null;
  is_archived: boolean;
  is_favorite: boolean;
  archived_at: number | null;
  created_at: number;
  updated_at: number;
}

export function toProjectObject(row: ProjectRow): ProjectObject {
  return {
    id: row.id,
    object: 'project',
    name: row.name,
    instruction: row.instruction,
    is_archived: row.is_archived,
    is_favorite: row.is_favorite,
    archived_at: row.archived_at === null ? null : Number(row.archived_at),
    created_at: Number(row.created_at),
    updated_at: Number(row.updated_at),
  };
}

const projectNotFound = (id: string) => notFound(`Project with id '${id}' not found.`);

export async function createProject(deps: ProjectDeps, userId: string, input: CreateProjectInput): Promise<ProjectObject> {
  const now = unixSeconds(deps.clock);
  const row = await insertProject(deps.knex, {
    id: newId('project'),
    user_id: userId,
    name: input.name,
    instruction: input.instruction ?? null,
    is_archived: false,
    is_favorite: false,
    archived_at: null,
    created_at: now,
    updated_at: now,
  });
  return toProjectObject(row);
}

export async function getProject(deps: ProjectDeps, userId: string, id: string): Promise<ProjectObject> {
  const row = await findProject(deps.knex, id, userId);
  if (!row) throw projectNotFound(id);
  return toProjectObject(row);
}

export async function listProjects(
  deps: ProjectDeps,
  filter: ProjectFilter,
  page: Page,
): Promise<ListEnvelope<ProjectObject>> {
  const [rows, total] = await Promise.all([projectPageQuery(deps.knex, filter, page), countProjects(deps.knex, filter)]);
  return listEnvelope((rows as ProjectRow[]).map(toProjectObject), total, page);
}

export async function patchProject(deps: ProjectDeps, userId: string, id: string, input: UpdateProjectInput): Promise<ProjectObject> {
  return deps.knex.transaction(async (trx) => {
    const row = await findProject(trx, id, userId, 'update');
    if (!row) throw projectNotFound(id);
    const now = unixSeconds(deps.clock);
    // Only what changes: a patch that changes nothing keeps updated_at and the list position.
    const patch: Partial<ProjectRow> = {};
    if (input.name !== undefined && input.name !== row.name) patch.name = input.name;
    if (input.instruction !== undefined && input.instruction !== row.instruction) patch.instruction = input.instruction;
    if (input.is_favorite !== undefined && input.is_favorite !== row.is_favorite) patch.is_favorite = input.is_favorite;
    if (input.is_archived !== undefined && input.is_archived !== row.is_archived) {
      patch.is_archived = input.is_archived;
      patch.archived_at = input.is_archived ? now : null;
    }
    if (Object.keys(patch).length === 0) return toProjectObject(row);
    return toProjectObject(await updateProject(trx, id, { ...patch, updated_at: now }));
  });
}

/** Soft delete; the project's conversations keep existing but lose the link (each emits conversation.updated). */
export async function deleteProject(deps: ProjectDeps, userId: string, id: string): Promise<{ id: string; object: 'project.deleted'; deleted: true }> {
  return deps.knex.transaction(async (trx) => {
    const row = await findProject(trx, id, userId, 'update');
    if (!row) throw projectNotFound(id);
    const now = unixSeconds(deps.clock);
    await updateProject(trx, id, { deleted_at: now, updated_at: now });
    await deps.detachConversations(trx, id);
    return { id, object: 'project.deleted' as const, deleted: true as const };
  });
}
