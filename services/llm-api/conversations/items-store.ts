import type { Db } from './store.js';

/**
 * Items, branches and branch references. A branch is an ordered list of `(position, item_id)`
 * references; items are written once and never copied.
 */
export interface ItemRow {
  id: string;
  conversation_id: string;
  type: string;
  role: string | null;
  body: Record<string, unknown>;
  created_at: number; // ms
}

/** An item as seen through one branch: the row plus its position there. */
export interface BranchItemRow extends ItemRow {
  position: number;
}

export interface BranchRow {
  id: number;
  conversation_id: string;
  name: string;
  description: string | null;
  parent_branch: string | null;
  forked_from_item_id: string | null;
  created_at: number;
  updated_at: number;
}

export async function insertItems(db: Db, rows: ItemRow[]): Promise<void> {
  if (rows.length === 0) return;
  await db('conversation_items').insert(rows.map((r) => ({ ...r, body: JSON.stringify(r.body) })));
}

export async function insertBranch(db: Db, row: Omit<BranchRow, 'id'>): Promise<BranchRow> {
  const [created] = await db('conversation_branches').insert(row).returning('*');
  return normalizeBranch(created as BranchRow);
}

export async function findBranch(db: Db, conversationId: string, name: string): Promise<BranchRow | undefined> {
  const row = await db<BranchRow>('conversation_branches').where({ conversation_id: conversationId, name }).first();
  return row ? normalizeBranch(row as BranchRow) : undefined;
}

/** A conversation's branches, oldest first: `limit` of them (all when absent) after skipping `offset`. */
export async function listBranches(db: Db, conversationId: string, page: { limit?: number; offset: number } = { offset: 0 }): Promise<(BranchRow & { item_count: number })[]> {
  const query = db('conversation_branches as b')
    .where('b.conversation_id', conversationId)
    .select('b.*', db.raw('(select coalesce(max(position), 0) from branch_items bi where bi.branch_id = b.id) as item_count'))
    .orderBy('b.id', 'asc')
    .offset(page.offset);
  if (page.limit !== undefined) query.limit(page.limit);
  const rows = await query;
  return (rows as (BranchRow & { item_count: number })[]).map((r) => ({ ...normalizeBranch(r), item_count: Number(r.item_count) }));
}

/** How many branches a conversation has. */
export async function countBranches(db: Db, conversationId: string): Promise<number> {
  const row = (await db('conversation_branches').where({ conversation_id: conversationId }).count<{ count: number | string }[]>({ count: '*' }))[0];
  return Number(row?.count ?? 0);
}

/**
 * How many items a branch holds (and so the position an append continues after): its last
 * position, one index entry where a `count(*)` reads every
 * reference (an item page asks it for `total_count`, so a count grew with the conversation).
 * Positions are 1..n by construction: appends continue after the last, and a delete, edit or fork
 * copies the references to a new branch renumbered 1..n (`copyRefs`); no reference is ever removed
 * from a branch alone.
 */
export async function countBranchItems(db: Db, branchId: number): Promise<number> {
  const row = (await db('branch_items').where({ branch_id: branchId }).max<{ last: number | null }[]>({ last: 'position' }))[0];
  return Number(row?.last ?? 0);
}

export async function renameBranch(db: Db, branchId: number, name: string, now: number): Promise<void> {
  await db('conversation_branches').where({ id: branchId }).update({ name, updated_at: now });
}

/**
 * Branches of a conversation forked from the branch called `from` name `to` as their parent
 * instead (that branch was renamed: `parent_branch` holds a name, not a row), or none when `to` is
 * null (that branch was deleted: a later branch of the same name is no parent of theirs).
 */
export async function reparentBranches(db: Db, conversationId: string, from: string, to: string | null, now: number): Promise<void> {
  await db('conversation_branches').where({ conversation_id: conversationId, parent_branch: from }).update({ parent_branch: to, updated_at: now });
}

export async function touchBranch(db: Db, branchId: number, now: number): Promise<void> {
  await db('conversation_branches').where({ id: branchId }).update({ updated_at: now });
}

/** Removes the branch and its references; the items themselves stay stored. */
export async function deleteBranch(db: Db, branchId: number): Promise<void> {
  await db('branch_items').where({ branch_id: branchId }).delete();
  await db('conversation_branches').where({ id: branchId }).delete();
}

/** Physically deletes the conversation's items that no branch references any more; returns how many. */
export async function deleteUnreferencedItems(db: Db, conversationId: string): Promise<number> {
  return db('conversation_items as i')
    .where('i.conversation_id', conversationId)
    .whereNotExists((q) => q.select(db.raw('1')).from('branch_items as bi').whereRaw('bi.item_id = i.id'))
    .delete();
}

/** Appends references at the end of a branch (caller holds the conversation lock). */
export async function appendRefs(db: Db, branchId: number, itemIds: string[]): Promise<number[]> {
  if (itemIds.length === 0) return [];
  const start = await countBranchItems(db, branchId);
  const positions = itemIds.map((_, i) => start + i + 1);
  await db('branch_items').insert(itemIds.map((item_id, i) => ({ branch_id: branchId, position: positions[i], item_id })));
  return positions;
}

/**
 * Copies references from one branch to another, renumbered 1..n in order: those with
 * `position <= through` (when given), minus `exceptItemId` (when given). Items are not copied.
 */
export async function copyRefs(
  db: Db,
  from: number,
  to: number,
  options: { through?: number; exceptItemId?: string } = {},
): Promise<number> {
  const bindings: (string | number)[] = [to, from];
  let where = 'branch_id = ?';
  if (options.through !== undefined) {
    where += ' and position <= ?';
    bindings.push(options.through);
  }
  if (options.exceptItemId !== undefined) {
    where += ' and item_id <> ?';
    bindings.push(options.exceptItemId);
  }
  const result = await db.raw(
    `insert into branch_items (branch_id, position, item_id)
       select ?, row_number() over (order by position), item_id from branch_items where ${where}`,
    bindings,
  );
  return Number((result as { rowCount?: number }).rowCount ?? 0);
}

const ITEM_COLUMNS = ['i.id', 'i.conversation_id', 'i.type', 'i.role', 'i.body', 'i.created_at', 'bi.position'];
/** What a history reader needs of an item (`HistoryRow`). */
export const HISTORY_COLUMNS = ['i.type', 'i.role', 'i.body', 'bi.position'] as const;
export type HistoryRow = Pick<BranchItemRow, 'type' | 'role' | 'body' | 'position'>;

/** One item as seen through a branch, or undefined when the branch does not reference it. */
export async function findBranchItem(db: Db, branchId: number, itemId: string): Promise<BranchItemRow | undefined> {
  const row = await db('branch_items as bi')
    .join('conversation_items as i', 'i.id', 'bi.item_id')
    .where({ 'bi.branch_id': branchId, 'bi.item_id': itemId })
    .first(...ITEM_COLUMNS);
  return row ? normalizeItem(row as BranchItemRow) : undefined;
}

/** The nearest item before `position` on the branch that matches `where` (e.g. a user message). */
export async function findItemBefore(db: Db, branchId: number, position: number, where: { type?: string; role?: string } = {}) {
  const query = db('branch_items as bi')
    .join('conversation_items as i', 'i.id', 'bi.item_id')
    .where('bi.branch_id', branchId)
    .where('bi.position', '<', position)
    .orderBy('bi.position', 'desc')
    .first(...ITEM_COLUMNS);
  if (where.type) query.where('i.type', where.type);
  if (where.role) query.where('i.role', where.role);
  const row = await query;
  return row ? normalizeItem(row as BranchItemRow) : undefined;
}

/**
 * The page query over one branch (exported so the index test can EXPLAIN exactly what runs).
 * Fetches `limit + 1` rows so the caller knows `has_more` exactly. The page's references are chosen
 * first and only they are joined to their items: whatever plan the database picks for the branch's
 * references (a table whose statistics lag its growth gets a sort of the whole branch), it never
 * fetches the items of a whole long conversation to keep a page of them.
 */
export function itemPageQuery(
  db: Db,
  params: { branchId: number; order: 'asc' | 'desc'; afterPosition?: number; offset?: number; limit: number },
  columns: readonly string[] = ITEM_COLUMNS,
) {
  const refs = db('branch_items')
    .where('branch_id', params.branchId)
    .select('position', 'item_id')
    .orderBy('position', params.order)
    .limit(params.limit + 1)
    .offset(params.offset ?? 0);
  if (params.afterPosition !== undefined) refs.where('position', params.order === 'asc' ? '>' : '<', params.afterPosition);
  return db
    .from(refs.as('bi'))
    .join('conversation_items as i', 'i.id', 'bi.item_id')
    .select(columns)
    .orderBy('bi.position', params.order);
}

export async function positionOf(db: Db, branchId: number, itemId: string): Promise<number | undefined> {
  const row = await db('branch_items').where({ branch_id: branchId, item_id: itemId }).first('position');
  return row ? Number((row as { position: number }).position) : undefined;
}

/**
 * How many parent branches back an `after` cursor's item is looked for. Every delete, edit or
 * regenerate puts one more backup between `MAIN` and the branch that still holds an item deleted
 * before it, so this many changes to a conversation while one client holds one cursor; past it the
 * cursor is refused like one that names no item (a client lists again without it). It bounds the
 * work a request can ask for with any id: the walk is one index lookup per branch.
 */
export const CURSOR_LINEAGE_DEPTH = 1000;

/**
 * The SQL of `formerPositionOf` (exported for the index suite, which EXPLAINs what is really sent).
 * Each step of the walk is one lookup of the parent by the `(conversation_id, name)` key (`lateral
 * … limit 1`: a join there may be planned as a hash of all the conversation's branches, rebuilt at
 * every step), and the walk stops at the first branch that holds the item or at `maxDepth`. An id
 * that is no item of this conversation (unknown, another conversation's or user's) has no anchor
 * row, so nothing is walked at all. `union all` is safe: the depth bound ends even a cycle of names.
 */
export function formerPositionSql(
  conversationId: string,
  branchId: number,
  itemId: string,
  maxDepth: number = CURSOR_LINEAGE_DEPTH,
): { sql: string; bindings: (string | number)[] } {
  const sql = `with recursive lineage (id, parent_branch, depth, holds) as (
       select b.id, b.parent_branch, 0,
              exists (select 1 from branch_items bi where bi.branch_id = b.id and bi.item_id = ?)
         from conversation_branches b
        where b.id = ?
          and exists (select 1 from conversation_items i where i.id = ? and i.conversation_id = ?)
       union all
       select p.id, p.parent_branch, l.depth + 1,
              exists (select 1 from branch_items bi where bi.branch_id = p.id and bi.item_id = ?)
         from lineage l
        cross join lateral (
          select c.id, c.parent_branch from conversation_branches c
           where c.conversation_id = ? and c.name = l.parent_branch
           limit 1
        ) p
        where not l.holds and l.depth < ?::int
     ),
     holder as (
       select bi.branch_id, bi.position from lineage l
         join branch_items bi on bi.branch_id = l.id and bi.item_id = ?
        where l.holds
        limit 1
     )
     select coalesce((select b.position from branch_items a
                         join branch_items b on b.branch_id = ? and b.item_id = a.item_id
                        where a.branch_id = h.branch_id and a.position < h.position
                        order by a.position desc limit 1), 0) as position
       from holder h`;
  return { sql, bindings: [itemId, branchId, itemId, conversationId, itemId, conversationId, maxDepth, itemId, branchId] };
}

/**
 * Where an item the branch no longer holds stood on it: the position on `branchId` of the nearest
 * item before it that the branch still holds (0 when none), read on the nearest branch of the
 * branch's lineage (itself, its parent, the parent's parent …) that still references the item.
 * A branch keeps its items in the order of the branch it came from, so the walk back stops at the
 * first item found. A delete, edit or regenerate keeps the replaced `MAIN` as the new `MAIN`'s
 * parent, so an item deleted from `MAIN` is still placed there while that chain of backups is
 * whole. Undefined when no branch of the lineage holds it: another branch's own item, another
 * conversation's, one erased with its last branch, one behind a deleted backup (deleting a branch
 * leaves its children without a parent, which ends the walk there), or one more than
 * `CURSOR_LINEAGE_DEPTH` branches back.
 */
export async function formerPositionOf(db: Db, conversationId: string, branchId: number, itemId: string, maxDepth = CURSOR_LINEAGE_DEPTH): Promise<number | undefined> {
  const { sql, bindings } = formerPositionSql(conversationId, branchId, itemId, maxDepth);
  const result = await db.raw(sql, bindings);
  const row = (result as { rows: { position: number | string | null }[] }).rows[0];
  return row ? Number(row.position ?? 0) : undefined;
}

export function normalizeItem(row: BranchItemRow): BranchItemRow {
  return { ...row, created_at: Number(row.created_at), position: Number(row.position) };
}

function normalizeBranch<T extends BranchRow>(row: T): T {
  return { ...row, id: Number(row.id), created_at: Number(row.created_at), updated_at: Number(row.updated_at) };
}

