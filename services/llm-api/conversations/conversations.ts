import type { Knex } from 'knex';
import { listEnvelope, newId, notFound, recordEvent, unixSeconds, type Clock, type ListEnvelope, type Page } from '../../kit/index.js';
import { MAIN, loadConversation, resolveBranch } from './access.js';
import { normalizeItem } from './item-schema.js';
import { appendToBranch } from './items.js';
import { countBranchItems, insertBranch } from './items-store.js';
import type { CreateConversationInput, UpdateConversationInput } from './schemas.js';
import {
  clearProjectLinks,
  conversationPageQuery,
  countConversations,
  insertConversation,
  lockProjectConversations,
  softDeleteConversation,
  updateConversation,
  type ConversationFilter,
  type ConversationRow,
  type Db,
} from './store.js';

/**
 * How conversations see projects: a port, because the projects resource owns that table (and
 * reaches conversations through a port of its own), so neither imports the other.
 */
export interface ProjectLookup {
  /** Whether the caller owns this live project, locking it FOR SHARE inside `trx`. */
  ownsForShare(trx: Knex.Transaction, projectId: string, userId: string): Promise<boolean>;
}

/** Conversations domain: create (with initial items), read, list, update, soft delete. */
export interface ConversationDeps {
  knex: Knex;
  clock: Clock;
  projects: ProjectLookup;
}

export interface ConversationObject {
  id: string;
  object: 'conversation';
  created_at: number;
  updated_at: number;
  metadata: Record<string, string>;
  project_id: string | null;
  referrer: string | null;
  title: string | null;
  active_branch: string;
}

export function toConversationObject(row: ConversationRow): ConversationObject {
  return {
    id: row.id,
    object: 'conversation',
    created_at: Number(row.created_at),
    updated_at: Number(row.updated_at),
    metadata: row.metadata ?? {},
    project_id: row.project_id,
    referrer: row.referrer,
    title: row.title,
    active_branch: row.active_branch,
  };
}

const iso = (seconds: number) => new Date(seconds * 1000).toISOString();
const projectNotFound = (id: string) => notFound(`Project with id '${id}' not found.`, undefined, 'project_id');

/** A project the caller owns, locked FOR SHARE so a concurrent project delete cannot slip between. */
async function requireProject(deps: ConversationDeps, trx: Knex.Transaction, projectId: string, userId: string): Promise<void> {
  if (!(await deps.projects.ownsForShare(trx, projectId, userId))) throw projectNotFound(projectId);
}

/**
 * `options.id`: the id to create it with, when the caller had to name the conversation before it
 * exists (chat completions with `store: true` announce it in a stream's first chunk and create it
 * with the exchange); otherwise a new one.
 */
export async function createConversation(deps: ConversationDeps, userId: string, input: CreateConversationInput, options: { id?: string } = {}): Promise<ConversationObject> {
  const bodies = (input.items ?? []).map((raw, i) => normalizeItem(raw, `items[${i}]`));
  return deps.knex.transaction(async (trx) => {
    if (input.project_id) await requireProject(deps, trx, input.project_id, userId);
    const now = unixSeconds(deps.clock);
    const row = await insertConversation(trx, {
      id: options.id ?? newId('conversation'),
      user_id: userId,
      project_id: input.project_id ?? null,
      title: input.title ?? null,
      referrer: input.referrer ?? null,
      metadata: input.metadata ?? {},
      created_at: now,
      updated_at: now,
    });
    const main = await insertBranch(trx, {
      conversation_id: row.id,
      name: MAIN,
      description: 'Main branch',
      parent_branch: null,
      forked_from_item_id: null,
      created_at: now,
      updated_at: now,
    });
    await recordEvent(trx, 'conversation.created', {
      conversation_id: row.id,
      user_id: userId,
      title: row.title,
      created_at: iso(now),
      metadata: row.metadata ?? {},
    });
    await appendToBranch(trx, row, main, bodies, { clock: deps.clock });
    return toConversationObject(row);
  });
}

export async function getConversation(deps: ConversationDeps, userId: string, id: string): Promise<ConversationObject> {
  return toConversationObject(await loadConversation(deps.knex, id, userId));
}

export async function listConversations(deps: ConversationDeps, filter: ConversationFilter, page: Page): Promise<ListEnvelope<ConversationObject>> {
  const [rows, total] = await Promise.all([conversationPageQuery(deps.knex, filter, page), countConversations(deps.knex, filter)]);
  return listEnvelope((rows as ConversationRow[]).map(toConversationObject), total, page);
}

/** Title, metadata (replaced as a whole; null clears) and project link; emits `conversation.updated` with the changed fields only. */
export async function patchConversation(deps: ConversationDeps, userId: string, id: string, input: UpdateConversationInput): Promise<ConversationObject> {
  return deps.knex.transaction(async (trx) => {
    const row = await loadConversation(trx, id, userId, true);
    const changes: Record<string, { old: unknown; new: unknown }> = {};
    const patch: Partial<ConversationRow> = {};
    if (input.title !== undefined && input.title !== row.title) {
      changes.title = { old: row.title, new: input.title };
      patch.title = input.title;
    }
    if (input.metadata !== undefined) {
      const next = input.metadata ?? {};
      if (!sameRecord(row.metadata ?? {}, next)) {
        changes.metadata = { old: row.metadata ?? {}, new: next };
        patch.metadata = next;
      }
    }
    if (input.project_id !== undefined && input.project_id !== row.project_id) {
      if (input.project_id !== null) await requireProject(deps, trx, input.project_id, userId);
      changes.project_id = { old: row.project_id, new: input.project_id };
      patch.project_id = input.project_id;
    }
    if (Object.keys(changes).length === 0) return toConversationObject(row);
    const now = unixSeconds(deps.clock);
    const updated = await updateConversation(trx, id, patch, now);
    await recordEvent(trx, 'conversation.updated', { conversation_id: id, changes, updated_at: iso(now) });
    return toConversationObject(updated);
  });
}

/** Soft delete: the row and its items stay stored; every later access answers 404. */
export async function deleteConversation(deps: ConversationDeps, userId: string, id: string): Promise<{ id: string; object: 'conversation.deleted'; deleted: true }> {
  return deps.knex.transaction(async (trx) => {
    const row = await loadConversation(trx, id, userId, true);
    const branch = await resolveBranch(trx, row);
    const messageCount = await countBranchItems(trx, branch.id);
    const now = unixSeconds(deps.clock);
    await softDeleteConversation(trx, id, now);
    await recordEvent(trx, 'conversation.deleted', { conversation_id: id, user_id: userId, message_count: messageCount, deleted_at: iso(now) });
    return { id, object: 'conversation.deleted' as const, deleted: true as const };
  });
}

/** Called by the projects domain inside its delete transaction: every live linked conversation loses the link. */
export async function detachProjectConversations(trx: Knex.Transaction, input: { projectId: string; clock: Clock }): Promise<number> {
  const rows = await lockProjectConversations(trx, input.projectId);
  const now = unixSeconds(input.clock);
  for (const row of rows) {
    await updateConversation(trx, row.id, { project_id: null }, now);
    await recordEvent(trx, 'conversation.updated', {
      conversation_id: row.id,
      changes: { project_id: { old: input.projectId, new: null } },
      updated_at: iso(now),
    });
  }
  // Soft-deleted conversations lose the link too (no event: they no longer exist for the API).
  await clearProjectLinks(trx, input.projectId);
  return rows.length;
}

function sameRecord(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && a[k] === b[k]);
}

export type { Db };
