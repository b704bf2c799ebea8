import test from 'ava';
import type { Knex } from 'knex';
import { newId } from '../../../services/kit/index.js';
import { conversationPageQuery, countConversations } from '../../../services/llm-api/conversations/store.js';
import { CURSOR_LINEAGE_DEPTH, formerPositionOf, formerPositionSql, itemPageQuery } from '../../../services/llm-api/conversations/items-store.js';
import { projectPageQuery } from '../../../services/llm-api/projects/store.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { openTestRuntime } from '../../helpers/env.js';
import { analyzeOwnTables, assertIndexBacked, batchInsert as insertRows, explainQuery, explainSql, type PlanNode } from '../../helpers/query-plans.js';

// Listing stays index-backed at volume: 10,000 conversations (and 50,000 items, 2,000 projects)
// spread over 500 users, bulk-inserted, then ANALYZE; the page queries the stores really run are
// EXPLAINed and must read through indexes, never a sequential scan. No timing is measured.
const USERS = 500;
const CONVERSATIONS_PER_USER = 20; // 10,000 conversations
const ITEMS_PER_CONVERSATION = 5; // 50,000 items
const PROJECTS_PER_USER = 4;

let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let knex: Knex;
const users: string[] = [];
const sample: { userId: string; conversationId: string; branchId: number; projectId: string; itemIds: string[] } = {} as never;
// One conversation with a chain of backups one longer than the cursor walk goes: `MAIN` and
// `CURSOR_LINEAGE_DEPTH + 1` ancestors, as that many deletes leave behind. Every branch holds `first`
// and `last`; only the oldest (`branchIds[0]`) still holds `deleted`, which stood between them, and
// the older half holds `early` too (deleted half-way: a cursor's item many backups share).
const CHAIN = CURSOR_LINEAGE_DEPTH + 2;
const chain: { conversationId: string; branchIds: number[]; first: string; early: string; deleted: string; last: string } = {} as never;

const batchInsert = (table: string, rows: Record<string, unknown>[]) => insertRows(knex, table, rows);

test.before(async () => {
  runtime = await openTestRuntime({ migrations: llmApiService.migrations, bus: 'pg' });
  knex = runtime.db.knex;
  const now = Math.floor(Date.now() / 1000);
  const userRows = Array.from({ length: USERS }, () => {
    const id = newId('user');
    users.push(id);
    return { id, subject: id };
  });
  await batchInsert('users', userRows);
  const projects: Record<string, unknown>[] = [];
  const conversations: Record<string, unknown>[] = [];
  const projectOf = new Map<string, string[]>();
  for (const userId of users) {
    const own: string[] = [];
    for (let p = 0; p < PROJECTS_PER_USER; p++) {
      const id = newId('project');
      own.push(id);
      projects.push({ id, user_id: userId, name: `p${p}`, is_archived: p === 3, is_favorite: p === 0, created_at: now, updated_at: now });
    }
    projectOf.set(userId, own);
    for (let c = 0; c < CONVERSATIONS_PER_USER; c++) {
      conversations.push({
        id: newId('conversation'),
        user_id: userId,
        project_id: c % 4 === 0 ? own[c % PROJECTS_PER_USER] : null,
        referrer: c % 3 === 0 ? 'web' : c % 3 === 1 ? 'mobile' : null,
        title: `c${c}`,
        metadata: '{}',
        created_at: now,
        updated_at: now,
        deleted_at: c === CONVERSATIONS_PER_USER - 1 ? now : null,
      });
    }
  }
  await batchInsert('projects', projects);
  await batchInsert('conversations', conversations);
  const branches = await (async () => {
    const rows = conversations.map((c) => ({ conversation_id: c.id, name: 'MAIN', created_at: now, updated_at: now }));
    const ids: { id: number; conversation_id: string }[] = [];
    for (let i = 0; i < rows.length; i += 1000) ids.push(...(await knex('conversation_branches').insert(rows.slice(i, i + 1000)).returning(['id', 'conversation_id'])));
    return ids;
  })();
  const items: Record<string, unknown>[] = [];
  const refs: Record<string, unknown>[] = [];
  const itemsOf = new Map<string, string[]>();
  for (const b of branches) {
    const list: string[] = [];
    for (let i = 0; i < ITEMS_PER_CONVERSATION; i++) {
      const id = newId('message');
      list.push(id);
      items.push({ id, conversation_id: b.conversation_id, type: 'message', role: i % 2 ? 'assistant' : 'user', body: JSON.stringify({ type: 'message', content: [{ type: 'input_text', text: `t${i}` }] }), created_at: Date.now() });
      refs.push({ branch_id: b.id, position: i + 1, item_id: id });
    }
    itemsOf.set(b.conversation_id, list);
  }
  await batchInsert('conversation_items', items);
  await batchInsert('branch_items', refs);

  const chainId = newId('conversation');
  await batchInsert('conversations', [{ id: chainId, user_id: users[0], title: 'chain', metadata: '{}', created_at: now, updated_at: now }]);
  const [first, early, deleted, last] = ['first', 'early', 'deleted', 'last'].map((t) => ({
    id: newId('message'), conversation_id: chainId, type: 'message', role: 'user',
    body: JSON.stringify({ type: 'message', content: [{ type: 'input_text', text: t }] }), created_at: Date.now(),
  }));
  await batchInsert('conversation_items', [first!, early!, deleted!, last!]);
  const branchIds: number[] = [];
  for (let k = 0; k < CHAIN; k++) {
    const name = k === CHAIN - 1 ? 'MAIN' : `MAIN_backup_${k + 1}`;
    const [row] = await knex('conversation_branches')
      .insert({ conversation_id: chainId, name, parent_branch: k === 0 ? null : `MAIN_backup_${k}`, created_at: now, updated_at: now })
      .returning('id');
    branchIds.push(Number((row as { id: number }).id));
  }
  const held = (k: number) => [first!, ...(k < CHAIN / 2 ? [early!] : []), ...(k === 0 ? [deleted!] : []), last!];
  await batchInsert('branch_items', branchIds.flatMap((branch_id, k) => held(k).map((item, i) => ({ branch_id, position: i + 1, item_id: item.id }))));
  Object.assign(chain, { conversationId: chainId, branchIds, first: first!.id, early: early!.id, deleted: deleted!.id, last: last!.id });
  await analyzeOwnTables(knex);

  const userId = users[Math.floor(USERS / 2)]!;
  const conv = conversations.find((c) => c.user_id === userId && c.project_id)!;
  Object.assign(sample, {
    userId,
    conversationId: conv.id as string,
    projectId: conv.project_id as string,
    branchId: Number(branches.find((b) => b.conversation_id === conv.id)!.id),
    itemIds: itemsOf.get(conv.id as string)!,
  });
});
test.after.always(() => runtime?.dispose());

const explain = (query: Knex.QueryBuilder) => explainQuery(knex, query);

test('the data set is as large as claimed', async (t) => {
  const count = async (table: string) => Number((await knex(table).count<{ c: number }[]>({ c: '*' }))[0]!.c);
  // Plus the one conversation of the branch chain and its four items.
  t.is(await count('conversations'), USERS * CONVERSATIONS_PER_USER + 1);
  t.is(await count('conversation_items'), USERS * CONVERSATIONS_PER_USER * ITEMS_PER_CONVERSATION + 4);
  t.is(await count('conversation_branches'), USERS * CONVERSATIONS_PER_USER + CHAIN);
  t.is(await countConversations(knex, { userId: sample.userId }), CONVERSATIONS_PER_USER - 1, 'soft-deleted excluded');
});

test('conversation pages (plain, by project, by referrer, deep offset) use the activity indexes', async (t) => {
  const page = { limit: 20, offset: 0 };
  assertIndexBacked(t, await explain(conversationPageQuery(knex, { userId: sample.userId }, page)), { conversations: ['conversations_user_activity'] });
  assertIndexBacked(t, await explain(conversationPageQuery(knex, { userId: sample.userId }, { limit: 5, offset: 10 })), {
    conversations: ['conversations_user_activity'],
  });
  assertIndexBacked(t, await explain(conversationPageQuery(knex, { userId: sample.userId, projectId: sample.projectId }, page)), {
    conversations: ['conversations_user_project_activity', 'conversations_user_activity'],
  });
  assertIndexBacked(t, await explain(conversationPageQuery(knex, { userId: sample.userId, referrer: 'web' }, page)), {
    conversations: ['conversations_user_referrer_activity', 'conversations_user_activity'],
  });
  // The page query returns what the index order promises: newest activity first.
  const rows = (await conversationPageQuery(knex, { userId: sample.userId }, page)) as { activity_seq: number }[];
  t.is(rows.length, CONVERSATIONS_PER_USER - 1);
  t.deepEqual(rows.map((r) => Number(r.activity_seq)), [...rows.map((r) => Number(r.activity_seq))].sort((a, b) => b - a));
});

test('item pages (asc, desc, after a cursor) use the branch reference key and the item primary key', async (t) => {
  const expected = { branch_items: ['branch_items_pkey'], conversation_items: ['conversation_items_pkey'] };
  assertIndexBacked(t, await explain(itemPageQuery(knex, { branchId: sample.branchId, order: 'desc', limit: 20 })), expected);
  assertIndexBacked(t, await explain(itemPageQuery(knex, { branchId: sample.branchId, order: 'asc', limit: 2, afterPosition: 2 })), expected);
  const rows = await itemPageQuery(knex, { branchId: sample.branchId, order: 'asc', limit: 2, afterPosition: 2 });
  t.deepEqual(rows.map((r: { id: string }) => r.id), sample.itemIds.slice(2, 5), 'limit + 1 rows after position 2');
});

test('project pages (plain and filtered) use the project activity index', async (t) => {
  const page = { limit: 20, offset: 0 };
  assertIndexBacked(t, await explain(projectPageQuery(knex, { userId: sample.userId }, page)), { projects: ['projects_user_activity'] });
  assertIndexBacked(t, await explain(projectPageQuery(knex, { userId: sample.userId, isArchived: false, isFavorite: true }, page)), {
    projects: ['projects_user_activity'],
  });
});

/** The executed plan's nodes, with the rows each really returned (per loop) and how often it ran. */
type Executed = PlanNode & { 'Actual Rows': number; 'Actual Loops': number; 'Rows Removed by Filter'?: number; 'Rows Removed by Index Recheck'?: number };
async function analyzedPlan(sql: string, bindings: readonly unknown[]): Promise<Executed[]> {
  const result = await knex.raw(`explain (analyze, timing off, format json) ${sql}`, bindings as never);
  const all = (plan: any): any[] => [plan, ...(plan.Plans ?? []).flatMap(all)];
  return all(result.rows[0]['QUERY PLAN'][0].Plan);
}

test('an after cursor deleted since walks the branch lineage by one index lookup per branch, never a scan of all the branches', async (t) => {
  // The worst a request can ask for: the item held only one step short of the depth bound.
  const main = chain.branchIds.at(-1)!;
  const { sql, bindings } = formerPositionSql(chain.conversationId, chain.branchIds[1]!, chain.deleted);
  assertIndexBacked(t, await explainSql(knex, sql, bindings), {
    conversation_branches: ['conversation_branches_conversation_id_name_unique'],
    branch_items: ['branch_items_branch_id_item_id_unique', 'branch_items_pkey'],
    conversation_items: ['conversation_items_pkey'],
  });
  // Executed (row counts, not timings): each read the walk repeats per branch finds at most its one
  // row and drops none, and no read of the branches returns more than one.
  for (const itemId of [chain.deleted, chain.early]) {
    const walk = formerPositionSql(chain.conversationId, main, itemId);
    const executed = await analyzedPlan(walk.sql, walk.bindings);
    const reads = executed.filter((n) => n['Relation Name'] === 'conversation_branches' || n['Relation Name'] === 'branch_items');
    t.true(reads.some((n) => n['Relation Name'] === 'conversation_branches' && n['Actual Loops'] > 1), 'the walk reads the branches once per step');
    for (const n of reads.filter((r) => r['Relation Name'] === 'conversation_branches' || r['Actual Loops'] > 1)) {
      t.true(n['Actual Rows'] <= 1, `one row per read of ${n['Relation Name']}, not the conversation's ${CHAIN} branches: ${JSON.stringify(n)}`);
      t.true((n['Rows Removed by Filter'] ?? 0) <= 1, `no rows read to be dropped: ${JSON.stringify(n)}`);
    }
    t.false(executed.some((n) => n['Node Type'] === 'Hash'), 'no hash of the branches rebuilt at every step');
  }
});

test('the lineage walk stops at the first branch holding the item, walks nothing for an id of no item of the conversation, and ends at the depth bound', async (t) => {
  const walked = async (branchId: number, itemId: string) => {
    const { sql, bindings } = formerPositionSql(chain.conversationId, branchId, itemId);
    const union = (await analyzedPlan(sql, bindings)).find((n) => n['Node Type'] === 'Recursive Union');
    return union ? union['Actual Rows'] * union['Actual Loops'] : 0;
  };
  // Held by the parent: the branch and its parent, not the whole chain behind them.
  t.is(await walked(chain.branchIds[1]!, chain.deleted), 2);
  const youngestWithEarly = Math.ceil(CHAIN / 2) - 1;
  t.is(await walked(chain.branchIds.at(-1)!, chain.early), CHAIN - youngestWithEarly, 'from MAIN back to the youngest backup holding it');
  t.is(await formerPositionOf(knex, chain.conversationId, chain.branchIds.at(-1)!, chain.early), 1);
  t.is(await formerPositionOf(knex, chain.conversationId, chain.branchIds[1]!, chain.deleted), 2, 'after `early`, the item before it');
  // Another conversation's item, or no item at all: nothing is walked, and it has no place.
  t.is(await walked(chain.branchIds.at(-1)!, sample.itemIds[0]!), 0);
  t.is(await walked(chain.branchIds.at(-1)!, 'msg_unknown'), 0);
  t.is(await formerPositionOf(knex, chain.conversationId, chain.branchIds.at(-1)!, sample.itemIds[0]!), undefined);
  // Exactly at the bound it is placed; one branch further it is refused like an unknown id.
  t.is(await formerPositionOf(knex, chain.conversationId, chain.branchIds.at(-2)!, chain.deleted), 1, `${CURSOR_LINEAGE_DEPTH} branches back`);
  t.is(await formerPositionOf(knex, chain.conversationId, chain.branchIds.at(-1)!, chain.deleted), undefined, `${CURSOR_LINEAGE_DEPTH + 1} branches back`);
  t.is(await walked(chain.branchIds.at(-1)!, chain.deleted), CURSOR_LINEAGE_DEPTH + 1, 'the walk ends at the bound');
});
