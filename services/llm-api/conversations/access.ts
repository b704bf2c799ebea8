import { ApiError, badRequest, notFound } from '../../kit/index.js';
import { findBranch, type BranchRow } from './items-store.js';
import { findConversation, type ConversationRow, type Db } from './store.js';

/** Ownership and branch resolution shared by the conversation, item and branch domains. */
export const MAIN = 'MAIN';

/** `param`: the body field that named the conversation (chat's `conversation`); none for a path id. */
export const conversationNotFound = (id: string, param?: string) => notFound(`Conversation with id '${id}' not found.`, undefined, param);
export const itemNotFound = (id: string) => notFound(`Item with id '${id}' not found.`);
export const branchNotFound = (name: string, param?: string) => notFound(`Branch '${name}' not found.`, undefined, param);

/**
 * The caller's live conversation or 404 (another user's and soft-deleted ones alike: existence is
 * not leaked). With `lock`, the row stays locked FOR UPDATE until the transaction ends.
 */
export async function loadConversation(db: Db, id: string, userId: string, lock = false, param?: string): Promise<ConversationRow> {
  const row = await findConversation(db, id, userId, lock);
  if (!row) throw conversationNotFound(id, param);
  return row;
}

/** `main` in any case means `MAIN`; other names are case-sensitive. */
export function normalizeBranchName(name: string): string {
  return name.toUpperCase() === MAIN ? MAIN : name;
}

export const BRANCH_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export function checkBranchName(name: string, param: string): string {
  if (!BRANCH_NAME.test(name)) throw badRequest(`Invalid value for '${param}': a branch name is 1-64 letters, digits, '_', '.' or '-'.`, param);
  return normalizeBranchName(name);
}

/** The named branch (default: the active one) or 404; `param` names the field the name came from. */
export async function resolveBranch(db: Db, conversation: ConversationRow, name?: string, param?: string): Promise<BranchRow> {
  const wanted = name === undefined ? conversation.active_branch : normalizeBranchName(name);
  const branch = await findBranch(db, conversation.id, wanted);
  if (!branch) {
    if (name === undefined) throw new ApiError(500, `conversation ${conversation.id} has no active branch row`);
    throw branchNotFound(wanted, param);
  }
  return branch;
}
