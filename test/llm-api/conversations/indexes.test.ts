import test from 'ava';
import type { Knex } from 'knex';
import { newId } from '../../../services/kit/index.js';
import { conversationPageQuery, countConversations } from '../../../services/llm-api/conversations/store.js';
import { itemPageQuery } from '../../../services/llm-api/conversations/items-store.js';
import { projectPageQuery } from '../../../services/llm-api/projects/store.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { openTestRuntime } from '../../helpers/env.js';
import { analyzeOwnTables, assertIndexBacked, batchInsert as insertRows, explainQuery } from '../../helpers/query-plans.js';

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
  t.is(await count('conversations'), USERS * CONVERSATIONS_PER_USER);
  t.is(await count('conversation_items'), USERS * CONVERSATIONS_PER_USER * ITEMS_PER_CONVERSATION);
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
