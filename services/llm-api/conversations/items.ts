import type { Knex } from 'knex';
import { badRequest, cursorEnvelope, newId, resolveCursor, recordEvent, systemClock, unixSeconds, type Clock, type CursorList } from '../../kit/index.js';
import { itemNotFound, loadConversation, resolveBranch } from './access.js';
import { normalizeItem, type StoredItemBody } from './item-schema.js';
import {
  appendRefs,
  findBranchItem,
  formerPositionOf,
  insertItems,
  countBranchItems,
  HISTORY_COLUMNS,
  itemPageQuery,
  type HistoryRow,
  normalizeItem as normalizeRow,
  positionOf,
  touchBranch,
  type BranchItemRow,
  type BranchRow,
} from './items-store.js';
import { updateConversation, type ConversationRow, type Db } from './store.js';

/**
 * The items domain. `appendItems` is THE one place that creates items and therefore the one place
 * that emits `message.sent` (once per created item whose role is user or assistant), whichever path
 * created it: POST …/items, conversation create with initial items, an edit, or chat completions
 * with `store: true`.
 */

export type ItemObject = Record<string, unknown> & {
  id: string;
  object: 'conversation.item';
  type: string;
  branch: string;
  sequence_number: number;
  created_at: string;
};

export interface TokensUsed {
  prompt: number;
  completion: number;
}

export interface AppendItemsInput {
  conversationId: string;
  userId: string;
  /** Raw items in any accepted shape (validated exactly like POST /v1/conversations/{id}/items). */
  items: unknown[];
  /** `message.sent.model` for the created items (chat: the model that answered). */
  model?: string | null;
  /**
   * `message.sent.tokens_used`, reported on the answer: the last assistant item at or after
   * `answerFrom` (chat: the completion's usage; a Responses turn: the usage of all its steps), on no
   * event when the answer has no assistant message (it only calls tools).
   */
  tokensUsed?: TokensUsed | null;
  /**
   * Index in `items` of the first item of the answer: the items before it are the request's input
   * (chat: its new messages; a Responses turn: its input items), whose assistant messages were
   * answers of earlier turns and never take `tokensUsed`. Default 0: the whole append is the answer.
   */
  answerFrom?: number;
  clock?: Clock;
  /** Query-style `include` values (e.g. `message.output_text.logprobs`) for the returned objects. */
  include?: string[];
}

export interface AppendItemsResult {
  conversation: ConversationRow;
  branch: string;
  items: ItemObject[];
}

/**
 * Validates `items` and appends them, in order, to the conversation's active branch, in one
 * transaction that holds the conversation's row lock. Runs inside `db` when it is a transaction
 * (as a savepoint), else in its own. Throws 404 when the conversation is not the user's or is
 * deleted, 400 (naming `items[i]…`) when an item is invalid.
 */
export async function appendItems(db: Knex | Knex.Transaction, input: AppendItemsInput): Promise<AppendItemsResult> {
  const bodies = input.items.map((raw, i) => normalizeItem(raw, `items[${i}]`));
  return db.transaction(async (trx) => {
    const conversation = await loadConversation(trx, input.conversationId, input.userId, true);
    const branch = await resolveBranch(trx, conversation);
    const clock = input.clock ?? systemClock;
    const created = await appendToBranch(trx, conversation, branch, bodies, { clock, model: input.model, tokensUsed: input.tokensUsed, answerFrom: input.answerFrom });
    const updated = await updateConversation(trx, conversation.id, {}, unixSeconds(clock));
    const include = new Set(input.include ?? []);
    return { conversation: updated, branch: branch.name, items: created.map((row) => toItemObject(row, branch.name, include)) };
  });
}

/**
 * Inserts validated item bodies and references them at the end of `branch` (caller holds the
 * conversation lock), recording `message.sent` for each user or assistant item, with `model` on
 * each and `tokensUsed` on the last assistant item at or after `answerFrom` (default 0), if any.
 */
export async function appendToBranch(
  trx: Knex.Transaction,
  conversation: ConversationRow,
  branch: BranchRow,
  bodies: StoredItemBody[],
  options: { clock: Clock; model?: string | null; tokensUsed?: TokensUsed | null; answerFrom?: number },
): Promise<BranchItemRow[]> {
  if (bodies.length === 0) return [];
  const nowMs = options.clock.now();
  const rows = bodies.map((body) => ({
    id: newId('message'),
    conversation_id: conversation.id,
    type: body.type,
    role: typeof body.role === 'string' ? body.role : null,
    body,
    created_at: nowMs,
  }));
  await insertItems(trx, rows);
  const positions = await appendRefs(trx, branch.id, rows.map((r) => r.id));
  await touchBranch(trx, branch.id, unixSeconds(options.clock));
  const sentAt = new Date(nowMs).toISOString();
  // The usage is the answer's: reported once, so summing `tokens_used` over the events counts it
  // once, even when the append also carries earlier assistant messages (a Responses step's). An
  // assistant message of the input is an earlier turn's answer: an answer without one of its own
  // (only tool calls) reports the usage on no event rather than on that.
  const answer = rows.findLast((row, i) => i >= (options.answerFrom ?? 0) && row.role === 'assistant');
  for (const row of rows) {
    if (row.role !== 'user' && row.role !== 'assistant') continue;
    await recordEvent(trx, 'message.sent', {
      conversation_id: conversation.id,
      message_id: row.id,
      role: row.role,
      content: row.body.content ?? null,
      model: options.model ?? null,
      tokens_used: row === answer && options.tokensUsed ? { prompt: options.tokensUsed.prompt, completion: options.tokensUsed.completion } : null,
      sent_at: sentAt,
    });
  }
  return rows.map((row, i) => normalizeRow({ ...row, position: positions[i]! }));
}

/** Include values the API knows (OpenAI's IncludeEnum); unknown values are a 400. */
export const INCLUDE_VALUES = [
  'message.output_text.logprobs',
  'reasoning.encrypted_content',
  'message.input_image.image_url',
  'web_search_call.action.sources',
  'web_search_call.results',
  'code_interpreter_call.outputs',
  'computer_call_output.output.image_url',
  'file_search_call.results',
] as const;

/** `include=a,b`, `include=a&include=b` and `include[]=a` (the SDK's form) all give [a, b]. */
export function parseInclude(value: unknown): string[] {
  const raw = (Array.isArray(value) ? value : value === undefined ? [] : [value]).flatMap((v) => (typeof v === 'string' ? v.split(',') : [v]));
  const out: string[] = [];
  raw.forEach((v, i) => {
    if (typeof v !== 'string' || !(INCLUDE_VALUES as readonly string[]).includes(v.trim())) {
      throw badRequest(`Invalid value for 'include[${i}]': must be one of ${INCLUDE_VALUES.join(', ')}.`, 'include');
    }
    out.push(v.trim());
  });
  return out;
}

/**
 * The API shape of a stored item seen through `branch`. Output-text logprobs and reasoning
 * `encrypted_content` are returned only when asked for with `include` (as OpenAI does); every
 * other stored field is returned as it was given.
 */
export function toItemObject(row: BranchItemRow, branch: string, include: Set<string>): ItemObject {
  const body = { ...row.body };
  if (!include.has('message.output_text.logprobs') && Array.isArray(body.content)) {
    body.content = body.content.map((part) => withoutLogprobs(part));
  }
  if (!include.has('reasoning.encrypted_content') && row.type === 'reasoning') delete body.encrypted_content;
  return {
    id: row.id,
    object: 'conversation.item',
    ...body,
    type: row.type,
    branch,
    sequence_number: row.position,
    created_at: new Date(row.created_at).toISOString(),
  };
}

function withoutLogprobs(part: unknown): unknown {
  if (typeof part !== 'object' || part === null) return part;
  const copy = { ...(part as Record<string, unknown>) };
  if (copy.type === 'output_text') delete copy.logprobs;
  if (typeof copy.output_text === 'object' && copy.output_text !== null) {
    const nested = { ...(copy.output_text as Record<string, unknown>) };
    delete nested.logprobs;
    copy.output_text = nested;
  }
  return copy;
}

export interface ItemListQuery {
  limit: number;
  order: 'asc' | 'desc';
  after?: string;
  offset?: number;
  include: string[];
  branch?: string;
}

export interface ItemList extends CursorList<ItemObject> {
  /** Items on the branch in all (whatever `after` and `offset` say). */
  total_count: number;
}

/**
 * One page of a branch (default: the active one). `after` is an item id on that branch (or deleted
 * from it since: see below); `has_more` is exact (one extra row is read) and `last_id` is the last
 * element of `data`, so the SDK's auto-pagination (`after = last_id`) visits every item exactly once.
 */
export async function listItems(db: Db, userId: string, conversationId: string, query: ItemListQuery): Promise<ItemList> {
  // One snapshot for every read of the page: between reading the branch and reading its page, a
  // branch delete (or a delete's new MAIN) committed by another request would otherwise answer an
  // empty page with `total_count: 0` for a branch that was whole when the list began.
  if (!('isTransaction' in db && db.isTransaction)) {
    return (db as Knex).transaction((trx) => listItems(trx, userId, conversationId, query), { isolationLevel: 'repeatable read', readOnly: true });
  }
  const conversation = await loadConversation(db, conversationId, userId);
  const branch = await resolveBranch(db, conversation, query.branch, 'branch');
  // A page continues after the cursor's item, or, when that item was deleted since (the client
  // paging as another tab deletes), from where it stood: `asc` goes on after the last item before
  // it, `desc` from that item down. An item no branch of its lineage holds (walked back at most
  // `CURSOR_LINEAGE_DEPTH` branches, and cut where a branch between was deleted) is the kit's 400.
  const afterPosition = await resolveCursor('after', query.after, async (id) => {
    const at = await positionOf(db, branch.id, id);
    if (at !== undefined) return at;
    const before = await formerPositionOf(db, conversation.id, branch.id, id);
    return before === undefined ? undefined : query.order === 'asc' ? before : before + 1;
  });
  const [rows, total] = await Promise.all([
    itemPageQuery(db, { branchId: branch.id, order: query.order, afterPosition, offset: query.offset ?? 0, limit: query.limit }) as Promise<BranchItemRow[]>,
    countBranchItems(db, branch.id),
  ]);
  const hasMore = rows.length > query.limit;
  const include = new Set(query.include);
  const data = rows.slice(0, query.limit).map((r) => toItemObject(normalizeRow(r), branch.name, include));
  return { ...cursorEnvelope(data, hasMore), total_count: total };
}

export async function getItem(
  db: Db,
  userId: string,
  conversationId: string,
  itemId: string,
  options: { include: string[]; branch?: string },
): Promise<ItemObject> {
  const conversation = await loadConversation(db, conversationId, userId);
  const branch = await resolveBranch(db, conversation, options.branch, 'branch');
  const row = await findBranchItem(db, branch.id, itemId);
  if (!row) throw itemNotFound(itemId);
  return toItemObject(row, branch.name, new Set(options.include));
}

/** Items read per page by `openHistory`: the first page, then twice the last, up to the largest. */
export const HISTORY_PAGE_FIRST = 32;
const HISTORY_PAGE_MAX = 1024;

/**
 * A stored item as history: its kind, role and content, its place on the branch, and the stored
 * body (for the fields of items other than messages: a `function_call`'s `call_id`, `name` and
 * `arguments`, a `function_call_output`'s `call_id` and `output`).
 */
export interface HistoryItem {
  type: string;
  role: string | null;
  content: unknown;
  position: number;
  body: Record<string, unknown>;
}

/**
 * The active branch's items newest first, for a caller that keeps only the most recent (chat
 * completions sends the history trimmed to the model's context). Pages are read on demand, each
 * twice the last, so a conversation far longer than what is kept costs a few pages and a short one
 * a single query; stopping the iteration stops the reading. Each page continues below the last
 * position read, so items appended meanwhile (above it) never shift or repeat what is read.
 */
export async function openHistory(
  db: Db,
  input: { conversationId: string; userId: string; param?: string },
): Promise<{ conversation: ConversationRow; newestFirst: () => AsyncGenerator<HistoryItem, void, undefined> }> {
  const conversation = await loadConversation(db, input.conversationId, input.userId, false, input.param);
  const branch = await resolveBranch(db, conversation);
  async function* newestFirst(): AsyncGenerator<HistoryItem, void, undefined> {
    let below: number | undefined;
    for (let size = HISTORY_PAGE_FIRST; ; size = Math.min(size * 2, HISTORY_PAGE_MAX)) {
      // The page query reads one row more than its limit (for has_more): that row is a page's too.
      const rows = (await itemPageQuery(db, { branchId: branch.id, order: 'desc', afterPosition: below, limit: size - 1 }, HISTORY_COLUMNS)) as HistoryRow[];
      for (const row of rows) yield { type: row.type, role: row.role, content: row.body.content, position: Number(row.position), body: row.body };
      if (rows.length < size) return;
      below = Number(rows.at(-1)!.position);
    }
  }
  return { conversation, newestFirst };
}
