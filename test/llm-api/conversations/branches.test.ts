import test from 'ava';
import type { TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { assertBadRequest, clientFor, eventsOf, startWithUser, text, type Client } from './client.js';

let svc: TestService;
let alice: Client;

test.before(async () => ({ svc, alice } = await startWithUser()));
test.after.always(() => svc?.close());

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const assistant = (t: string) => ({ type: 'message', role: 'assistant', content: t });

/** A conversation with `n` alternating user/assistant items; returns its id and item ids in order. */
async function conversationWith(n: number): Promise<{ id: string; items: string[] }> {
  const items = Array.from({ length: n }, (_, i) => (i % 2 === 0 ? text(`u${i}`) : assistant(`a${i}`)));
  const c = await alice.post('/v1/conversations', {});
  const r = await alice.post(`/v1/conversations/${c.body.id}/items`, { items });
  return { id: c.body.id, items: r.body.data.map((i: any) => i.id) };
}

const ids = async (id: string, branch?: string) =>
  (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100${branch ? `&branch=${branch}` : ''}`)).body.data.map((i: any) => i.id) as string[];

test('deleting an item removes only that item from MAIN; the old MAIN survives as a backup; ids are kept', async (t) => {
  const { id, items } = await conversationWith(5);
  const before = await alice.get(`/v1/conversations/${id}/items?order=asc`);
  const r = await alice.del(`/v1/conversations/${id}/items/${items[2]}`);
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.id, id, 'the SDK reads the conversation');
  t.is(r.body.object, 'conversation');
  t.is(r.body.branch, 'MAIN');
  t.true(r.body.branch_created);
  t.true(r.body.deleted);
  t.is(r.body.old_main_backup, 'MAIN_backup_1');
  t.deepEqual(await ids(id), [items[0], items[1], items[3], items[4]], 'every other item, in order, same ids');
  const main = await alice.get(`/v1/conversations/${id}/items?order=asc`);
  t.deepEqual(main.body.data.map((i: any) => i.sequence_number), [1, 2, 3, 4]);
  t.is(main.body.total_count, 4, 'the count the page shows is the renumbered branch');
  // Items are references: the survivors are the very same stored items.
  for (const item of main.body.data) {
    const old = before.body.data.find((b: any) => b.id === item.id);
    t.deepEqual({ ...item, sequence_number: 0 }, { ...old, sequence_number: 0 });
  }
  t.is((await alice.get(`/v1/conversations/${id}/items/${items[2]}`)).status, 404, 'gone from the active branch');
  const fromBackup = await alice.get(`/v1/conversations/${id}/items/${items[2]}?branch=MAIN_backup_1`);
  t.is(fromBackup.status, 200);
  t.is(fromBackup.body.branch, 'MAIN_backup_1');
  t.is(fromBackup.body.sequence_number, 3);
  t.deepEqual(await ids(id, 'MAIN_backup_1'), items);
  const stored = await svc.runtime.db.knex('conversation_items').where({ conversation_id: id });
  t.is(stored.length, 5, 'no item copied, none destroyed');
  const deleted = await eventsOf(svc.runtime.db.knex, 'message.deleted', id);
  t.is(deleted.length, 1);
  t.deepEqual(Object.keys(deleted[0]!).sort(), ['conversation_id', 'deleted_at', 'message_id', 'role']);
  t.is(deleted[0]!.message_id, items[2]);
  t.is(deleted[0]!.role, 'user');
  t.regex(deleted[0]!.deleted_at, ISO);
  // Deleting it again is a 404 (not on the active branch), and nothing else happens.
  t.is((await alice.del(`/v1/conversations/${id}/items/${items[2]}`)).status, 404);
  t.is((await eventsOf(svc.runtime.db.knex, 'message.deleted', id)).length, 1);
  // New items go to the new MAIN after the survivors.
  const added = await alice.post(`/v1/conversations/${id}/items`, { items: [text('later')] });
  t.is(added.body.data[0].sequence_number, 5);
  // A second delete gets the next backup name.
  const r2 = await alice.del(`/v1/conversations/${id}/items/${items[0]}`);
  t.is(r2.body.old_main_backup, 'MAIN_backup_2');
  const branches = await alice.get(`/v1/conversations/${id}/branches`);
  t.deepEqual(branches.body.data.map((b: any) => b.name).sort(), ['MAIN', 'MAIN_backup_1', 'MAIN_backup_2']);
});

test('concurrent deletes on one conversation serialise: each item removed once, unique backups, one event each', async (t) => {
  const { id, items } = await conversationWith(12);
  const victims = items.filter((_, i) => i % 2 === 1); // 6 assistant items, deleted at once
  const replies = await Promise.all(victims.map((item) => alice.del(`/v1/conversations/${id}/items/${item}`)));
  t.deepEqual(replies.map((r) => r.status), victims.map(() => 200));
  const backups = replies.map((r) => r.body.old_main_backup);
  t.is(new Set(backups).size, victims.length, `backup names never collide: ${backups.join(', ')}`);
  t.deepEqual(await ids(id), items.filter((_, i) => i % 2 === 0));
  const deleted = await eventsOf(svc.runtime.db.knex, 'message.deleted', id);
  t.deepEqual(deleted.map((e) => e.message_id).sort(), [...victims].sort());
  const branches = await alice.get(`/v1/conversations/${id}/branches`);
  t.is(branches.body.data.length, victims.length + 1);
  t.is(branches.body.data.filter((b: any) => b.name === 'MAIN').length, 1);
  // Each backup is a consistent snapshot: one fewer item than the previous one, in order.
  const counts = branches.body.data.filter((b: any) => b.name !== 'MAIN').map((b: any) => b.item_count).sort((a: number, b: number) => b - a);
  t.deepEqual(counts, [12, 11, 10, 9, 8, 7]);
});

test('concurrent deletes of the SAME item: one succeeds, the others are 404, one event', async (t) => {
  const { id, items } = await conversationWith(4);
  const replies = await Promise.all(Array.from({ length: 5 }, () => alice.del(`/v1/conversations/${id}/items/${items[1]}`)));
  t.deepEqual(replies.map((r) => r.status).sort(), [200, 404, 404, 404, 404]);
  t.deepEqual(await ids(id), [items[0], items[2], items[3]]);
  t.is((await eventsOf(svc.runtime.db.knex, 'message.deleted', id)).length, 1);
});

test('concurrent appends and deletes interleave safely (positions stay dense and unique)', async (t) => {
  const { id, items } = await conversationWith(6);
  const ops = [
    alice.post(`/v1/conversations/${id}/items`, { items: [text('n1')] }),
    alice.del(`/v1/conversations/${id}/items/${items[1]}`),
    alice.post(`/v1/conversations/${id}/items`, { items: [text('n2'), text('n3')] }),
    alice.del(`/v1/conversations/${id}/items/${items[3]}`),
    alice.post(`/v1/conversations/${id}/items`, { items: [text('n4')] }),
  ];
  const replies = await Promise.all(ops);
  t.deepEqual(replies.map((r) => r.status), [200, 200, 200, 200, 200]);
  const main = await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100`);
  t.is(main.body.data.length, 6 - 2 + 4);
  t.deepEqual(main.body.data.map((i: any) => i.sequence_number), [1, 2, 3, 4, 5, 6, 7, 8]);
  const got = main.body.data.map((i: any) => i.id);
  t.false(got.includes(items[1]));
  t.false(got.includes(items[3]));
});

test('edit: user messages only; new MAIN = history before it + the edited message; message.edited and message.sent', async (t) => {
  const { id, items } = await conversationWith(4); // u0 a1 u2 a3
  const bad = await alice.post(`/v1/conversations/${id}/items/${items[1]}/edit`, { content: 'x' });
  t.is(bad.status, 400);
  t.is(bad.body.error.param, 'item_id');
  const badContent = await alice.post(`/v1/conversations/${id}/items/${items[2]}/edit`, { content: 5 });
  t.is(badContent.status, 400);
  t.is(badContent.body.error.param, 'content');
  const missing = await alice.post(`/v1/conversations/${id}/items/${items[2]}/edit`, {});
  t.is(missing.status, 400);
  t.is(missing.body.error.param, 'content');
  const unknown = await alice.post(`/v1/conversations/${id}/items/${items[2]}/edit`, { content: 'x', role: 'assistant' });
  t.is(unknown.status, 400);
  t.is(unknown.body.error.param, 'role');
  t.is((await alice.post(`/v1/conversations/${id}/items/msg_nope/edit`, { content: 'x' })).status, 404);

  const r = await alice.post(`/v1/conversations/${id}/items/${items[2]}/edit`, { content: 'u2 edited' });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.branch, 'MAIN');
  t.true(r.body.branch_created);
  t.is(r.body.old_main_backup, 'MAIN_backup_1');
  t.is(r.body.new_branch.name, 'MAIN');
  t.is(r.body.new_branch.item_count, 3);
  t.true(r.body.new_branch.is_active);
  const newItem = r.body.user_item;
  t.regex(newItem.id, /^msg_/);
  t.not(newItem.id, items[2]);
  t.deepEqual(newItem.content, [{ type: 'input_text', text: 'u2 edited' }]);
  t.deepEqual(await ids(id), [items[0], items[1], newItem.id]);
  t.deepEqual(await ids(id, 'MAIN_backup_1'), items, 'the original history is kept');
  const edited = await eventsOf(svc.runtime.db.knex, 'message.edited', id);
  t.is(edited.length, 1);
  t.deepEqual(Object.keys(edited[0]!).sort(), ['conversation_id', 'edited_at', 'message_id', 'new_content', 'previous_content']);
  t.is(edited[0]!.message_id, items[2]);
  t.deepEqual(edited[0]!.previous_content, [{ type: 'input_text', text: 'u2' }]);
  t.deepEqual(edited[0]!.new_content, [{ type: 'input_text', text: 'u2 edited' }]);
  const sent = await eventsOf(svc.runtime.db.knex, 'message.sent', id);
  t.is(sent.at(-1)!.message_id, newItem.id, 'the new user item is announced by message.sent');
  t.is(sent.length, 5);
});

test('regenerate: new MAIN ends at the user message before the answer; message.edited', async (t) => {
  const { id, items } = await conversationWith(4); // u0 a1 u2 a3
  const r = await alice.post(`/v1/conversations/${id}/items/${items[3]}/regenerate`);
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.user_item_id, items[2]);
  t.is(r.body.old_main_backup, 'MAIN_backup_1');
  t.is(r.body.new_branch.item_count, 3);
  t.deepEqual(await ids(id), [items[0], items[1], items[2]]);
  const fromUser = await alice.post(`/v1/conversations/${id}/items/${items[0]}/regenerate`);
  t.is(fromUser.body.user_item_id, items[0]);
  t.deepEqual(await ids(id), [items[0]]);
  t.is(fromUser.body.old_main_backup, 'MAIN_backup_2');
  const edited = await eventsOf(svc.runtime.db.knex, 'message.edited', id);
  t.deepEqual(edited.map((e) => e.message_id), [items[3], items[0]]);
  t.deepEqual(edited[0]!.previous_content, [{ type: 'output_text', text: 'a3', annotations: [] }]);
  t.is(edited[0]!.new_content, null);
  // No user message before the first assistant item; a system item cannot be regenerated.
  const c = await alice.post('/v1/conversations', { items: [{ role: 'system', content: 's' }, assistant('hi')] });
  const list = await ids(c.body.id);
  const noUser = await alice.post(`/v1/conversations/${c.body.id}/items/${list[1]}/regenerate`);
  t.is(noUser.status, 400);
  const system = await alice.post(`/v1/conversations/${c.body.id}/items/${list[0]}/regenerate`);
  t.is(system.status, 400);
  t.is(system.body.error.param, 'item_id');
});

test('branch endpoints: list, create (full or forked from an item), get, activate, delete rules', async (t) => {
  const { id, items } = await conversationWith(4);
  const list0 = await alice.get(`/v1/conversations/${id}/branches`);
  t.is(list0.body.object, 'list');
  t.is(list0.body.active_branch, 'MAIN');
  t.deepEqual(list0.body.data.map((b: any) => [b.name, b.item_count, b.is_active]), [['MAIN', 4, true]]);

  const fork = await alice.post(`/v1/conversations/${id}/branches`, { name: 'alt', fork_from_item_id: items[1], description: 'try again' });
  t.is(fork.status, 201, JSON.stringify(fork.body));
  t.like(fork.body, { object: 'conversation.branch', name: 'alt', parent_branch: 'MAIN', forked_from_item_id: items[1], item_count: 2, is_active: false, description: 'try again' });
  t.true(Number.isInteger(fork.body.created_at));
  const full = await alice.post(`/v1/conversations/${id}/branches`, { name: 'copy' });
  t.is(full.body.item_count, 4);
  t.deepEqual(await ids(id, 'copy'), items);

  for (const [body, param] of [
    [{ name: 'MAIN' }, 'name'],
    [{ name: 'main' }, 'name'],
    [{ name: 'alt' }, 'name'],
    [{ name: 'has space' }, 'name'],
    [{}, 'name'],
    [{ name: 'x2', fork_from_item_id: 'msg_nope' }, 'fork_from_item_id'],
    [{ name: 'x4', parent: 'MAIN' }, 'parent'],
    [{ name: 'x5', fork_from: items[1] }, 'fork_from'],
  ] as const) {
    const r = await alice.post(`/v1/conversations/${id}/branches`, body);
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.error.param, param, JSON.stringify(body));
  }
  const noParent = await alice.post(`/v1/conversations/${id}/branches`, { name: 'x3', parent_branch: 'nope' });
  t.is(noParent.status, 404);
  t.is(noParent.body.error.param, 'parent_branch', 'the 404 names the body field the unknown branch came from');
  const noBranch = await alice.get(`/v1/conversations/${id}/items?branch=nope`);
  t.is(noBranch.status, 404);
  t.is(noBranch.body.error.param, 'branch');

  const dotted = await alice.post(`/v1/conversations/${id}/branches`, { name: 'v1.2-x_y', fork_from_item_id: items[0] });
  t.is(dotted.status, 201);
  t.is((await alice.get(`/v1/conversations/${id}/branches/v1.2-x_y`)).body.item_count, 1);
  t.is((await alice.del(`/v1/conversations/${id}/branches/v1.2-x_y`)).status, 200);
  const got = await alice.get(`/v1/conversations/${id}/branches/alt`);
  t.is(got.body.item_count, 2);
  t.is((await alice.get(`/v1/conversations/${id}/branches/nope`)).status, 404);
  t.is((await alice.get(`/v1/conversations/${id}/branches/main`)).body.name, 'MAIN', 'main is MAIN');

  const act = await alice.post(`/v1/conversations/${id}/branches/alt/activate`);
  t.is(act.status, 200);
  t.is(act.body.active_branch, 'alt');
  t.is((await alice.get(`/v1/conversations/${id}`)).body.active_branch, 'alt');
  t.is((await alice.post(`/v1/conversations/${id}/branches/alt/activate`)).status, 200, 'activating the active branch again is a no-op');
  const activations = await eventsOf(svc.runtime.db.knex, 'conversation.updated', id);
  t.deepEqual(activations.map((e) => e.changes), [{ active_branch: { old: 'MAIN', new: 'alt' } }], 'one event per effective change');
  // New items go to the active branch; reads default to it.
  const added = await alice.post(`/v1/conversations/${id}/items`, { items: [text('on alt')] });
  t.is(added.body.data[0].branch, 'alt');
  t.is(added.body.data[0].sequence_number, 3);
  t.deepEqual(await ids(id), [items[0], items[1], added.body.data[0].id]);
  t.deepEqual(await ids(id, 'MAIN'), items);
  t.is((await alice.get(`/v1/conversations/${id}/items/${items[3]}`)).status, 404, 'not on the active branch');

  const delActive = await alice.del(`/v1/conversations/${id}/branches/alt`);
  t.is(delActive.status, 400);
  t.is(delActive.body.error.param, 'branch');
  const delMain = await alice.del(`/v1/conversations/${id}/branches/MAIN`);
  t.is(delMain.status, 400);
  t.is((await alice.del(`/v1/conversations/${id}/branches/nope`)).status, 404);
  const delCopy = await alice.del(`/v1/conversations/${id}/branches/copy`);
  t.deepEqual(delCopy.body, { object: 'conversation.branch.deleted', name: 'copy', deleted: true });
  t.is((await alice.get(`/v1/conversations/${id}/branches/copy`)).status, 404);
  t.is((await svc.runtime.db.knex('conversation_items').where({ conversation_id: id })).length, 5, 'deleting a branch keeps items');

  // Deleting an item while a side branch is active: the new MAIN is built from the active history.
  const del = await alice.del(`/v1/conversations/${id}/items/${items[0]}`);
  t.is(del.status, 200);
  t.is(del.body.active_branch, 'MAIN');
  t.deepEqual(await ids(id), [items[1], added.body.data[0].id]);
  t.deepEqual(await ids(id, 'alt'), [items[0], items[1], added.body.data[0].id], 'alt itself is untouched');
  t.deepEqual(await ids(id, del.body.old_main_backup), items, 'the previous MAIN is the backup');
  t.is((await alice.post(`/v1/conversations/${id}/branches/nope/activate`)).status, 404);
});

test('branches forked from MAIN name the backup as their parent once MAIN is replaced (delete, edit)', async (t) => {
  const { id, items } = await conversationWith(4);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'side', fork_from_item_id: items[1] })).status, 201);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'deeper', parent_branch: 'side' })).status, 201);
  const del = await alice.del(`/v1/conversations/${id}/items/${items[3]}`);
  t.is(del.body.old_main_backup, 'MAIN_backup_1');
  const parents = async () =>
    Object.fromEntries((await alice.get(`/v1/conversations/${id}/branches`)).body.data.map((b: any) => [b.name, b.parent_branch]));
  // `side` holds the history of the MAIN it was forked from, which is now called MAIN_backup_1.
  t.deepEqual(await parents(), { MAIN_backup_1: null, side: 'MAIN_backup_1', deeper: 'side', MAIN: 'MAIN_backup_1' });
  t.is((await alice.get(`/v1/conversations/${id}/branches/side`)).body.parent_branch, 'MAIN_backup_1');
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'later' })).status, 201);
  const edit = await alice.post(`/v1/conversations/${id}/items/${items[2]}/edit`, { content: 'again' });
  t.is(edit.status, 200, JSON.stringify(edit.body));
  t.is(edit.body.old_main_backup, 'MAIN_backup_2');
  t.deepEqual(await parents(), { MAIN_backup_1: null, side: 'MAIN_backup_1', deeper: 'side', MAIN_backup_2: 'MAIN_backup_1', later: 'MAIN_backup_2', MAIN: 'MAIN_backup_2' });
});

test('the branch list is paged like every list (SPEC.md 9): limit/offset, has_more, total_count', async (t) => {
  const { id } = await conversationWith(2);
  for (const name of ['b1', 'b2', 'b3']) t.is((await alice.post(`/v1/conversations/${id}/branches`, { name })).status, 201);
  const all = await alice.get(`/v1/conversations/${id}/branches`);
  t.is(all.status, 200);
  t.like(all.body, { object: 'list', has_more: false, total_count: 4, active_branch: 'MAIN' });
  t.deepEqual(all.body.data.map((b: any) => b.name), ['MAIN', 'b1', 'b2', 'b3'], 'without limit: every branch, oldest first');
  const page = await alice.get(`/v1/conversations/${id}/branches?limit=2&offset=1`);
  t.deepEqual(page.body.data.map((b: any) => b.name), ['b1', 'b2']);
  t.like(page.body, { object: 'list', has_more: true, total_count: 4, active_branch: 'MAIN' });
  const last = await alice.get(`/v1/conversations/${id}/branches?limit=2&offset=2`);
  t.deepEqual(last.body.data.map((b: any) => b.name), ['b2', 'b3']);
  t.false(last.body.has_more);
  for (const [query, param] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=x', 'limit'], ['offset=-1', 'offset']] as const) {
    assertBadRequest(t, await alice.get(`/v1/conversations/${id}/branches?${query}`), param);
  }
});

test('a branch named like a future backup does not make backups collide', async (t) => {
  const { id, items } = await conversationWith(3);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'MAIN_backup_1' })).status, 201);
  const r = await alice.del(`/v1/conversations/${id}/items/${items[0]}`);
  t.is(r.status, 200);
  t.is(r.body.old_main_backup, 'MAIN_backup_2');
});

test.serial('a branch operation waits for the conversation row lock held by another transaction', async (t) => {
  const { id, items } = await conversationWith(3);
  const knex = svc.runtime.db.knex;
  const trx = await knex.transaction();
  try {
    await trx('conversations').where({ id }).forUpdate().first();
    const xid = String((await trx.raw('select (txid_current() % 4294967296)::text as xid')).rows[0].xid);
    const pending = alice.del(`/v1/conversations/${id}/items/${items[1]}`);
    // Bounded poll on a condition (no sleep as synchronisation): another backend waits for OUR transaction.
    let waiting = 0;
    for (let i = 0; i < 2000 && waiting === 0; i++) {
      const rows = await knex.raw("select count(*)::int as n from pg_locks where not granted and locktype = 'transactionid' and transactionid::text = ?", [xid]);
      waiting = rows.rows[0].n;
      if (waiting === 0) await new Promise((r) => setImmediate(r));
    }
    t.true(waiting > 0, 'the DELETE is waiting for the row lock');
    t.deepEqual(await ids(id), items, 'nothing changed while the lock is held');
    await trx.commit();
    const done = await pending;
    t.is(done.status, 200);
    t.deepEqual(await ids(id), [items[0], items[2]]);
  } finally {
    if (!trx.isCompleted()) await trx.rollback();
  }
});

test('activating the branch that is already active changes nothing: the conversation keeps its place in the list', async (t) => {
  // A user of its own: the list holds only this test's conversations.
  const carol = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  const older = (await carol.post('/v1/conversations', {})).body;
  const newer = (await carol.post('/v1/conversations', {})).body;
  const order = async () => (await carol.get('/v1/conversations?limit=100')).body.data.map((c: any) => c.id);
  t.deepEqual(await order(), [newer.id, older.id]);
  const again = await carol.post(`/v1/conversations/${older.id}/branches/MAIN/activate`);
  t.is(again.status, 200);
  t.is(again.body.active_branch, 'MAIN');
  t.deepEqual(await order(), [newer.id, older.id], 'the older conversation did not move to the top');
  t.deepEqual(await eventsOf(svc.runtime.db.knex, 'conversation.updated', older.id), []);
  // An effective activation is a change: it moves the conversation up.
  t.is((await carol.post(`/v1/conversations/${older.id}/branches`, { name: 'alt' })).status, 201);
  t.deepEqual(await order(), [older.id, newer.id]);
  t.is((await carol.post(`/v1/conversations/${newer.id}/branches`, { name: 'alt' })).status, 201);
  t.deepEqual(await order(), [newer.id, older.id]);
  await carol.post(`/v1/conversations/${older.id}/branches/alt/activate`);
  t.deepEqual(await order(), [older.id, newer.id]);
});
