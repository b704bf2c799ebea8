import test from 'ava';
import type { TestService } from '../../helpers/env.js';
import { assertBadRequest, eventsOf, startWithTwoUsers, text, type Client } from './client.js';

let svc: TestService;
let alice: Client;
let bob: Client;

test.before(async () => ({ svc, alice, bob } = await startWithTwoUsers()));
test.after.always(() => svc?.close());

/** A conversation of `n` user messages; returns its id and item ids in order. */
async function conversationWith(n: number): Promise<{ id: string; items: string[] }> {
  const c = await alice.post('/v1/conversations', {});
  const r = await alice.post(`/v1/conversations/${c.body.id}/items`, { items: Array.from({ length: n }, (_, i) => text(`m${i}`)) });
  return { id: c.body.id, items: r.body.data.map((i: any) => i.id) };
}

const activeBranchChanges = async (id: string) =>
  (await eventsOf(svc.runtime.db.knex, 'conversation.updated', id)).filter((e) => e.changes.active_branch).map((e) => e.changes.active_branch);

test('an item delete, edit or regenerate on a side branch makes MAIN active and announces it like an activation', async (t) => {
  for (const operation of ['delete', 'edit', 'regenerate'] as const) {
    const { id, items } = await conversationWith(3);
    t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'side', fork_from_item_id: items[1] })).status, 201);
    t.is((await alice.post(`/v1/conversations/${id}/branches/side/activate`)).status, 200);
    const r =
      operation === 'delete'
        ? await alice.del(`/v1/conversations/${id}/items/${items[0]}`)
        : await alice.post(`/v1/conversations/${id}/items/${items[0]}/${operation}`, operation === 'edit' ? { content: 'new' } : undefined);
    t.is(r.status, 200, `${operation}: ${JSON.stringify(r.body)}`);
    t.is((await alice.get(`/v1/conversations/${id}`)).body.active_branch, 'MAIN', operation);
    t.deepEqual(await activeBranchChanges(id), [{ old: 'MAIN', new: 'side' }, { old: 'side', new: 'MAIN' }], operation);
    // From MAIN, active_branch stays MAIN: nothing more is announced.
    const again = await alice.del(`/v1/conversations/${id}/items/${(await alice.get(`/v1/conversations/${id}/items`)).body.data[0].id}`);
    t.is(again.status, 200);
    t.is((await activeBranchChanges(id)).length, 2, operation);
  }
});

test('deleting a branch leaves no branch naming it as parent: a later branch of that name is not their parent', async (t) => {
  const { id, items } = await conversationWith(3);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'a' })).status, 201);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'b', parent_branch: 'a', fork_from_item_id: items[1] })).status, 201);
  t.is((await alice.del(`/v1/conversations/${id}/branches/a`)).status, 200);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'a', fork_from_item_id: items[0] })).status, 201);
  const b = await alice.get(`/v1/conversations/${id}/branches/b`);
  t.is(b.status, 200);
  t.is(b.body.parent_branch, null);
  t.is(b.body.forked_from_item_id, items[1]);
  t.is(b.body.item_count, 2, 'its items are referenced, so none was erased');
  const listed = await alice.get(`/v1/conversations/${id}/items?branch=b&order=asc`);
  t.deepEqual(listed.body.data.map((i: any) => [i.id, i.sequence_number]), [[items[0], 1], [items[1], 2]]);
});

test('another user gets 404 on every branch route; foreign item ids are refused as not on the branch', async (t) => {
  const { id, items } = await conversationWith(2);
  t.is((await bob.get(`/v1/conversations/${id}/branches`)).status, 404);
  t.is((await bob.post(`/v1/conversations/${id}/branches`, { name: 'x' })).status, 404);
  t.is((await bob.get(`/v1/conversations/${id}/branches/MAIN`)).status, 404);
  t.is((await bob.post(`/v1/conversations/${id}/branches/MAIN/activate`)).status, 404);
  t.is((await bob.del(`/v1/conversations/${id}/branches/MAIN`)).status, 404);
  t.is((await bob.post(`/v1/conversations/${id}/items/${items[0]}/edit`, { content: 'x' })).status, 404);
  t.is((await bob.post(`/v1/conversations/${id}/items/${items[0]}/regenerate`)).status, 404);
  t.is((await alice.get(`/v1/conversations/${id}/branches`)).body.total_count, 1, 'nothing was created');
  const own = (await bob.post('/v1/conversations', {})).body.id;
  assertBadRequest(t, await bob.post(`/v1/conversations/${own}/branches`, { name: 'x', fork_from_item_id: items[0] }), 'fork_from_item_id');
  assertBadRequest(t, await bob.get(`/v1/conversations/${own}/items?after=${items[0]}`), 'after');
  t.is((await bob.get(`/v1/conversations/${own}/items/${items[0]}`)).status, 404);
});

test('metadata bounds hold on update (POST and PATCH) as on create', async (t) => {
  const { id } = await conversationWith(1);
  const pairs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
  for (const call of [(b: unknown) => alice.post(`/v1/conversations/${id}`, b), (b: unknown) => alice.patch(`/v1/conversations/${id}`, b)]) {
    assertBadRequest(t, await call({ metadata: pairs(17) }), 'metadata');
    assertBadRequest(t, await call({ metadata: { ['k'.repeat(65)]: 'v' } }), `metadata.${'k'.repeat(65)}`);
    assertBadRequest(t, await call({ metadata: { a: 'v'.repeat(513) } }), 'metadata.a');
    assertBadRequest(t, await call({ metadata: { a: 5 } }), 'metadata.a');
  }
  const ok = await alice.patch(`/v1/conversations/${id}`, { metadata: { ...pairs(15), ['k'.repeat(64)]: 'v'.repeat(512) } });
  t.is(ok.status, 200);
  t.is(Object.keys(ok.body.metadata).length, 16);
});

test('concurrent creates of one branch name: one 201, the others 400; concurrent appends keep positions dense', async (t) => {
  const { id } = await conversationWith(1);
  const created = await Promise.all(Array.from({ length: 5 }, () => alice.post(`/v1/conversations/${id}/branches`, { name: 'dup' })));
  t.deepEqual(created.map((r) => r.status).sort(), [201, 400, 400, 400, 400]);
  const appended = await Promise.all(Array.from({ length: 10 }, (_, i) => alice.post(`/v1/conversations/${id}/items`, { items: [text(`c${i}`), text(`d${i}`)] })));
  t.true(appended.every((r) => r.status === 200));
  const listed = await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100`);
  t.deepEqual(listed.body.data.map((i: any) => i.sequence_number), Array.from({ length: 21 }, (_, i) => i + 1));
});

test('NUL and unpaired surrogates are a 400 naming the field on every conversation write, and store nothing', async (t) => {
  const { id, items } = await conversationWith(1);
  for (const bad of ['a\u0000b', 'a\ud800b', 'a\udc00']) {
    assertBadRequest(t, await alice.post(`/v1/conversations/${id}/items`, { items: [text('ok'), text(bad)] }), 'items[1].content[0].text');
    assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { [bad]: 'v' } }), `metadata.${bad.replace(/[\u0000\ud800-\udfff]/g, '\ufffd')}`);
    assertBadRequest(t, await alice.patch(`/v1/conversations/${id}`, { title: bad }), 'title');
    assertBadRequest(t, await alice.post(`/v1/conversations/${id}/items/${items[0]}/edit`, { content: bad }), 'content');
    assertBadRequest(t, await alice.post(`/v1/conversations/${id}/branches`, { name: 'x', description: bad }), 'description');
  }
  t.is((await alice.get(`/v1/conversations/${id}/items`)).body.data.length, 1);
  t.is((await alice.get(`/v1/conversations/${id}/branches`)).body.total_count, 1);
});
