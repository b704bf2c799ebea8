import test from 'ava';
import { createDatabase, kitMigrations, migrateAll, systemClock } from '../../../services/kit/index.js';
import { activateBranch, createBranch, deleteItem, editItem } from '../../../services/llm-api/conversations/branches.js';
import { createConversation, deleteConversation, detachProjectConversations } from '../../../services/llm-api/conversations/conversations.js';
import { appendItems, listItems } from '../../../services/llm-api/conversations/items.js';
import { conversationsMigrations } from '../../../services/llm-api/conversations/migrations.js';
import { createProject, deleteProject } from '../../../services/llm-api/projects/projects.js';
import { projectsMigrations } from '../../../services/llm-api/projects/migrations.js';
import { findProject } from '../../../services/llm-api/projects/store.js';

// The same migrations and SQL on the embedded driver (PGlite, what `npm start` uses without DATABASE_URL).
test('conversations, items, branches and projects work on PGlite', async (t) => {
  const db = await createDatabase({ dataDir: '.', inMemory: true });
  t.teardown(() => db.close());
  await migrateAll(db.knex, [kitMigrations, { owner: 'llm_api', migrations: [...projectsMigrations, ...conversationsMigrations] }]);
  await db.knex('users').insert({ id: 'user_embedded', subject: 'user_embedded' });
  const deps = {
    knex: db.knex,
    clock: systemClock,
    detachConversations: (trx: Parameters<typeof detachProjectConversations>[0], projectId: string) => detachProjectConversations(trx, { projectId, clock: systemClock }),
    projects: { ownsForShare: async (trx: Parameters<typeof findProject>[0], id: string, userId: string) => (await findProject(trx, id, userId, 'share')) !== undefined },
  };
  const project = await createProject(deps, 'user_embedded', { name: 'P' });
  const c = await createConversation(deps, 'user_embedded', { project_id: project.id, items: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }] });
  const added = await appendItems(db.knex, { conversationId: c.id, userId: 'user_embedded', items: [{ role: 'user', content: 'c' }] });
  t.is(added.items[0]!.sequence_number, 3);
  const alt = await createBranch(deps, 'user_embedded', c.id, { name: 'alt' });
  t.is(alt.item_count, 3);
  const deleted = await deleteItem(deps, 'user_embedded', c.id, added.items[0]!.id);
  t.is(deleted.old_main_backup, 'MAIN_backup_1');
  // A cursor naming the deleted item continues from where it stood (read through the branch lineage).
  const resumed = await listItems(db.knex, 'user_embedded', c.id, { limit: 10, order: 'desc', after: added.items[0]!.id, include: [] });
  t.deepEqual(resumed.data.map((i) => i.sequence_number), [2, 1]);
  const page = await listItems(db.knex, 'user_embedded', c.id, { limit: 1, order: 'asc', include: [] });
  t.true(page.has_more);
  const first = page.data[0]!.id;
  const edited = await editItem(deps, 'user_embedded', c.id, first, 'a2');
  t.is(edited.old_main_backup, 'MAIN_backup_2');
  t.is((await activateBranch(deps, 'user_embedded', c.id, 'alt')).active_branch, 'alt');
  await deleteProject(deps, 'user_embedded', project.id);
  t.is((await db.knex('conversations').where({ id: c.id }).first()).project_id, null);
  await deleteConversation(deps, 'user_embedded', c.id);
  const types = (await db.knex('outbox_events').orderBy('seq').select('type')).map((r: { type: string }) => r.type);
  t.deepEqual(types, [
    'conversation.created', 'message.sent', 'message.sent', 'message.sent', 'message.deleted',
    'message.sent', 'message.edited', 'conversation.updated' /* activate */, 'conversation.updated' /* project unlink */, 'conversation.deleted',
  ]);
});
