import type { Knex } from 'knex';
import { badRequest, listEnvelope, recordEvent, unixSeconds, type Clock } from '../../kit/index.js';
import { MAIN, branchNotFound, checkBranchName, itemNotFound, loadConversation, normalizeBranchName, resolveBranch } from './access.js';
import { toConversationObject, type ConversationObject } from './conversations.js';
import { normalizeContent } from './item-schema.js';
import { appendToBranch, toItemObject, type ItemObject } from './items.js';
import {
  copyRefs,
  deleteBranch,
  deleteUnreferencedItems,
  findBranch,
  findBranchItem,
  findItemBefore,
  insertBranch,
  listBranches,
  countBranchItems,
  countBranches,
  renameBranch,
  reparentBranches,
  type BranchItemRow,
  type BranchRow,
} from './items-store.js';
import { nextBackupNumber, updateConversation, type ConversationRow } from './store.js';

/**
 * Branches. A branch is an ordered list of references to items; no operation copies an item.
 * Every operation runs in ONE transaction that first locks the conversation row (FOR UPDATE), so
 * concurrent operations on one conversation queue up instead of interleaving, and the backup name
 * (`MAIN_backup_<n>`, n from a per-conversation counter taken under that lock, skipping names in
 * use) never collides.
 */
export interface BranchDeps {
  knex: Knex;
  clock: Clock;
}

export interface BranchObject {
  object: 'conversation.branch';
  name: string;
  description: string | null;
  parent_branch: string | null;
  forked_from_item_id: string | null;
  item_count: number;
  is_active: boolean;
  created_at: number;
  updated_at: number;
}

function toBranchObject(row: BranchRow, itemCount: number, activeBranch: string): BranchObject {
  return {
    object: 'conversation.branch',
    name: row.name,
    description: row.description,
    parent_branch: row.parent_branch,
    forked_from_item_id: row.forked_from_item_id,
    item_count: itemCount,
    is_active: row.name === activeBranch,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

const iso = (seconds: number) => new Date(seconds * 1000).toISOString();

interface Locked {
  trx: Knex.Transaction;
  conversation: ConversationRow;
  now: number;
}

/** Runs `work` in one transaction holding the conversation's row lock. */
function withLockedConversation<T>(deps: BranchDeps, userId: string, conversationId: string, work: (locked: Locked) => Promise<T>): Promise<T> {
  return deps.knex.transaction(async (trx) => {
    const conversation = await loadConversation(trx, conversationId, userId, true);
    return work({ trx, conversation, now: unixSeconds(deps.clock) });
  });
}

async function backupName(trx: Knex.Transaction, conversationId: string): Promise<string> {
  for (;;) {
    const name = `MAIN_backup_${await nextBackupNumber(trx, conversationId)}`;
    if (!(await findBranch(trx, conversationId, name))) return name;
  }
}

/**
 * Makes a new branch the conversation's `MAIN`: the current `MAIN` is renamed to a unique backup,
 * a new `MAIN` row is created and filled by `fill`, and `MAIN` becomes active.
 */
async function installNewMain(
  locked: Locked,
  meta: { description: string; parent_branch: string; forked_from_item_id: string | null },
  fill: (branch: BranchRow) => Promise<void>,
): Promise<{ branch: BranchRow; oldMainBackup: string | null; conversation: ConversationRow }> {
  const { trx, conversation, now } = locked;
  const main = await findBranch(trx, conversation.id, MAIN);
  let oldMainBackup: string | null = null;
  if (main) {
    oldMainBackup = await backupName(trx, conversation.id);
    await renameBranch(trx, main.id, oldMainBackup, now);
    // The branches forked from the old MAIN hold its history: they follow it to its new name.
    await reparentBranches(trx, conversation.id, MAIN, oldMainBackup, now);
  }
  const parent = meta.parent_branch === MAIN && oldMainBackup ? oldMainBackup : meta.parent_branch;
  const branch = await insertBranch(trx, { conversation_id: conversation.id, name: MAIN, ...meta, parent_branch: parent, created_at: now, updated_at: now });
  await fill(branch);
  const updated = await updateConversation(trx, conversation.id, { active_branch: MAIN }, now);
  // Leaving another active branch for MAIN is the change an activation announces: announce it too.
  if (conversation.active_branch !== MAIN) {
    await recordEvent(trx, 'conversation.updated', {
      conversation_id: conversation.id,
      changes: { active_branch: { old: conversation.active_branch, new: MAIN } },
      updated_at: iso(now),
    });
  }
  return { branch, oldMainBackup, conversation: updated };
}

async function activeItem(locked: Locked, itemId: string): Promise<{ branch: BranchRow; item: BranchItemRow }> {
  const branch = await resolveBranch(locked.trx, locked.conversation);
  const item = await findBranchItem(locked.trx, branch.id, itemId);
  if (!item) throw itemNotFound(itemId);
  return { branch, item };
}

export type DeleteItemResult = ConversationObject & { branch: string; branch_created: true; deleted: true; old_main_backup: string | null };

/**
 * DELETE …/items/{item_id}: a new `MAIN` referencing every other item of the active branch, in
 * order; the previous `MAIN` is kept as a backup where the item stays readable. The answer is the
 * conversation (what the SDK reads) plus `branch`, `branch_created`, `deleted`, `old_main_backup`.
 */
export async function deleteItem(deps: BranchDeps, userId: string, conversationId: string, itemId: string): Promise<DeleteItemResult> {
  return withLockedConversation(deps, userId, conversationId, async (locked) => {
    const { branch: source, item } = await activeItem(locked, itemId);
    const result = await installNewMain(
      locked,
      { description: `Without item ${itemId}`, parent_branch: source.name, forked_from_item_id: null },
      async (branch) => void (await copyRefs(locked.trx, source.id, branch.id, { exceptItemId: itemId })),
    );
    await recordEvent(locked.trx, 'message.deleted', { conversation_id: conversationId, message_id: itemId, role: item.role, deleted_at: iso(locked.now) });
    return { ...toConversationObject(result.conversation), branch: MAIN, branch_created: true as const, deleted: true as const, old_main_backup: result.oldMainBackup };
  });
}

export interface BranchOperationResult {
  branch: string;
  branch_created: true;
  old_main_backup: string | null;
  new_branch: BranchObject;
}

/**
 * POST …/items/{item_id}/edit: user messages only. The new `MAIN` holds the active branch's items
 * before the edited message, then a new user message with the new content (later items are left
 * to the backup: the client asks for a fresh answer next). Emits `message.sent` for the new item
 * and `message.edited` (message_id = the edited item).
 */
export async function editItem(
  deps: BranchDeps,
  userId: string,
  conversationId: string,
  itemId: string,
  rawContent: unknown,
): Promise<BranchOperationResult & { user_item: ItemObject }> {
  const content = normalizeContent(rawContent, 'user');
  return withLockedConversation(deps, userId, conversationId, async (locked) => {
    const { branch: source, item } = await activeItem(locked, itemId);
    if (item.type !== 'message' || item.role !== 'user') throw badRequest('Only user messages can be edited.', 'item_id');
    const previous = item.body.content;
    let created: BranchItemRow | undefined;
    const result = await installNewMain(
      locked,
      { description: `Edit of ${itemId}`, parent_branch: source.name, forked_from_item_id: itemId },
      async (branch) => {
        await copyRefs(locked.trx, source.id, branch.id, { through: item.position - 1 });
        [created] = await appendToBranch(locked.trx, locked.conversation, branch, [{ type: 'message', role: 'user', status: 'completed', content }], {
          clock: deps.clock,
        });
      },
    );
    await recordEvent(locked.trx, 'message.edited', {
      conversation_id: conversationId,
      message_id: itemId,
      previous_content: previous ?? null,
      new_content: content,
      edited_at: iso(locked.now),
    });
    const count = await countBranchItems(locked.trx, result.branch.id);
    return {
      branch: MAIN,
      branch_created: true as const,
      old_main_backup: result.oldMainBackup,
      new_branch: toBranchObject(result.branch, count, MAIN),
      user_item: toItemObject(created!, MAIN, new Set()),
    };
  });
}

/**
 * POST …/items/{item_id}/regenerate: the new `MAIN` ends at the user message (the named one, or
 * the last user message before a named assistant item), ready for the client to request a new
 * answer. Emits `message.edited` (message_id = the named item, new_content null: the new answer
 * arrives later as `message.sent`).
 */
export async function regenerateItem(
  deps: BranchDeps,
  userId: string,
  conversationId: string,
  itemId: string,
): Promise<BranchOperationResult & { user_item_id: string }> {
  return withLockedConversation(deps, userId, conversationId, async (locked) => {
    const { branch: source, item } = await activeItem(locked, itemId);
    let userItem: BranchItemRow | undefined;
    if (item.type === 'message' && item.role === 'user') userItem = item;
    else if (item.role === 'assistant') userItem = await findItemBefore(locked.trx, source.id, item.position, { type: 'message', role: 'user' });
    else throw badRequest('Only user or assistant messages can be regenerated.', 'item_id');
    if (!userItem) throw badRequest('There is no user message before this item to regenerate from.', 'item_id');
    const through = userItem.position;
    const result = await installNewMain(
      locked,
      { description: `Regeneration of ${itemId}`, parent_branch: source.name, forked_from_item_id: userItem.id },
      async (branch) => void (await copyRefs(locked.trx, source.id, branch.id, { through })),
    );
    await recordEvent(locked.trx, 'message.edited', {
      conversation_id: conversationId,
      message_id: itemId,
      previous_content: item.body.content ?? null,
      new_content: null,
      edited_at: iso(locked.now),
    });
    return {
      branch: MAIN,
      branch_created: true as const,
      old_main_backup: result.oldMainBackup,
      new_branch: toBranchObject(result.branch, through, MAIN),
      user_item_id: userItem.id,
    };
  });
}

/**
 * The conversation's branches, oldest first, as a list of SPEC.md 9 (`has_more`, `total_count`) plus
 * `active_branch`: `limit` of them after `offset`, or all of them when no `limit` is given.
 */
export async function listConversationBranches(deps: BranchDeps, userId: string, conversationId: string, page: { limit?: number; offset?: number } = {}) {
  const conversation = await loadConversation(deps.knex, conversationId, userId);
  const offset = page.offset ?? 0;
  const [rows, total] = await Promise.all([listBranches(deps.knex, conversation.id, { limit: page.limit, offset }), countBranches(deps.knex, conversation.id)]);
  return {
    ...listEnvelope(
      rows.map((r) => toBranchObject(r, r.item_count, conversation.active_branch)),
      total,
      { limit: page.limit ?? total, offset },
    ),
    active_branch: conversation.active_branch,
  };
}

export async function getBranch(deps: BranchDeps, userId: string, conversationId: string, name: string): Promise<BranchObject> {
  const conversation = await loadConversation(deps.knex, conversationId, userId);
  const branch = await resolveBranch(deps.knex, conversation, name);
  return toBranchObject(branch, await countBranchItems(deps.knex, branch.id), conversation.active_branch);
}

/**
 * Creates a branch from `parent_branch` (default: the active one): its items through
 * `fork_from_item_id` when given, else all of them. Items are referenced, never copied.
 */
export async function createBranch(
  deps: BranchDeps,
  userId: string,
  conversationId: string,
  input: { name: string; description?: string | null; parent_branch?: string | null; fork_from_item_id?: string | null },
): Promise<BranchObject> {
  const name = checkBranchName(input.name, 'name');
  if (name === MAIN) throw badRequest("The branch name 'MAIN' is reserved.", 'name');
  return withLockedConversation(deps, userId, conversationId, async (locked) => {
    const { trx, conversation, now } = locked;
    if (await findBranch(trx, conversation.id, name)) throw badRequest(`A branch named '${name}' already exists.`, 'name');
    const parent = await resolveBranch(trx, conversation, input.parent_branch ?? undefined, 'parent_branch');
    let through: number | undefined;
    if (input.fork_from_item_id) {
      const item = await findBranchItem(trx, parent.id, input.fork_from_item_id);
      if (!item) throw badRequest(`Item '${input.fork_from_item_id}' is not on branch '${parent.name}'.`, 'fork_from_item_id');
      through = item.position;
    }
    const branch = await insertBranch(trx, {
      conversation_id: conversation.id,
      name,
      description: input.description ?? null,
      parent_branch: parent.name,
      forked_from_item_id: input.fork_from_item_id ?? null,
      created_at: now,
      updated_at: now,
    });
    const count = await copyRefs(trx, parent.id, branch.id, { through });
    await updateConversation(trx, conversation.id, {}, now);
    return toBranchObject(branch, count, conversation.active_branch);
  });
}

/**
 * Deletes a branch (never `MAIN` nor the active branch) and, physically, every item of the
 * conversation no remaining branch references: deleting the backup branch an item delete left
 * behind is how an item's content is erased for good.
 */
export async function removeBranch(deps: BranchDeps, userId: string, conversationId: string, rawName: string) {
  const name = normalizeBranchName(rawName);
  return withLockedConversation(deps, userId, conversationId, async ({ trx, conversation, now }) => {
    if (name === MAIN) throw badRequest("The 'MAIN' branch cannot be deleted.", 'branch');
    if (name === conversation.active_branch) throw badRequest('The active branch cannot be deleted; activate another branch first.', 'branch');
    const branch = await findBranch(trx, conversation.id, name);
    if (!branch) throw branchNotFound(name);
    await deleteBranch(trx, branch.id);
    await reparentBranches(trx, conversation.id, name, null, now);
    await deleteUnreferencedItems(trx, conversation.id);
    await updateConversation(trx, conversation.id, {}, now);
    return { object: 'conversation.branch.deleted' as const, name, deleted: true as const };
  });
}

/** Makes a branch the active one: new items go there and reads default to it. */
export async function activateBranch(deps: BranchDeps, userId: string, conversationId: string, rawName: string) {
  return withLockedConversation(deps, userId, conversationId, async ({ trx, conversation, now }) => {
    const branch = await resolveBranch(trx, conversation, rawName);
    // Activating the branch that is already active changes nothing: like a PATCH that changes
    // nothing, it keeps `updated_at` and the conversation's place in the list (a client selecting
    // the current branch again must not move the conversation to the top).
    if (branch.name !== conversation.active_branch) {
      await updateConversation(trx, conversation.id, { active_branch: branch.name }, now);
      await recordEvent(trx, 'conversation.updated', {
        conversation_id: conversation.id,
        changes: { active_branch: { old: conversation.active_branch, new: branch.name } },
        updated_at: iso(now),
      });
    }
    return {
      active_branch: branch.name,
      message: 'Branch activated successfully',
      branch: toBranchObject(branch, await countBranchItems(trx, branch.id), branch.name),
    };
  });
}
