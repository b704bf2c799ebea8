import test from 'ava';
import type { TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { assertBadRequest, clientFor, eventsOf, startWithTwoUsers, text, type Client } from './client.js';

let svc: TestService;
let alice: Client;
let bob: Client;

test.before(async () => {
  ({ svc, alice, bob } = await startWithTwoUsers());
});
test.after.always(() => svc?.close());

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function assertNotFound(t: import('ava').ExecutionContext, r: { status: number; body: any }, what: string) {
  t.is(r.status, 404, `${what}: ${JSON.stringify(r.body)}`);
  t.is(r.body.error.type, 'not_found_error', what);
  t.is(r.body.error.code, 'not_found', what);
}

test('create returns a conversation with integer timestamps and emits conversation.created', async (t) => {
  const r = await alice.post('/v1/conversations', { title: 'Hello', referrer: 'web', metadata: { topic: 'demo' } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.regex(r.body.id, /^conv_[0-9A-Za-z]{24}$/);
  t.is(r.body.object, 'conversation');
  t.true(Number.isInteger(r.body.created_at));
  t.true(Number.isInteger(r.body.updated_at));
  t.deepEqual(r.body.metadata, { topic: 'demo' });
  t.is(r.body.title, 'Hello');
  t.is(r.body.referrer, 'web');
  t.is(r.body.project_id, null);
  const events = await eventsOf(svc.runtime.db.knex, 'conversation.created', r.body.id);
  t.is(events.length, 1);
  t.deepEqual(Object.keys(events[0]!).sort(), ['conversation_id', 'created_at', 'metadata', 'title', 'user_id']);
  t.is(events[0]!.conversation_id, r.body.id);
  t.is(events[0]!.user_id, alice.user.id);
  t.is(events[0]!.title, 'Hello');
  t.deepEqual(events[0]!.metadata, { topic: 'demo' });
  t.regex(events[0]!.created_at, ISO);
  // Both prefixes reach the same handler.
  const viaLlm = await alice.get(`/llm/v1/conversations/${r.body.id}`);
  t.is(viaLlm.status, 200);
  t.is(viaLlm.body.id, r.body.id);
});

test('an empty body creates a conversation with empty metadata', async (t) => {
  const r = await alice.post('/v1/conversations');
  t.is(r.status, 200);
  t.deepEqual(r.body.metadata, {});
  t.is(r.body.title, null);
});

test('every create limit breach is a 400 naming its param', async (t) => {
  const pairs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: pairs(17) }), 'metadata');
  t.is((await alice.post('/v1/conversations', { metadata: pairs(16) })).status, 200, '16 pairs are allowed');
  const longKey = 'k'.repeat(65);
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { [longKey]: 'v' } }), `metadata.${longKey}`);
  t.is((await alice.post('/v1/conversations', { metadata: { ['k'.repeat(64)]: 'v'.repeat(512) } })).status, 200, 'key 64 / value 512 allowed');
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { a: 'v'.repeat(513) } }), 'metadata.a');
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { a: 5 } }), 'metadata.a');
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: ['x'] }), 'metadata');
  const items = (n: number) => Array.from({ length: n }, (_, i) => text(`m${i}`));
  assertBadRequest(t, await alice.post('/v1/conversations', { items: items(21) }), 'items');
  t.is((await alice.post('/v1/conversations', { items: items(20) })).status, 200, '20 items are allowed');
  assertBadRequest(t, await alice.post('/v1/conversations', { items: [text('ok'), text('ok'), { type: 'bogus', content: 'x' }] }), 'items[2].type');
  assertBadRequest(t, await alice.post('/v1/conversations', { items: [{ type: 'message', role: 'user' }] }), 'items[0].content');
  assertBadRequest(t, await alice.post('/v1/conversations', { items: [{ type: 'message', role: 'robot', content: 'x' }] }), 'items[0].role');
  assertBadRequest(t, await alice.post('/v1/conversations', { title: 't'.repeat(257) }), 'title');
  assertBadRequest(t, await alice.post('/v1/conversations', { referrer: 'r'.repeat(257) }), 'referrer');
  assertBadRequest(t, await alice.post('/v1/conversations', { title: 5 }), 'title');
  const malformed = await alice.call('POST', '/v1/conversations', undefined);
  t.is(malformed.status, 200, 'no body at all is an empty create');
});

test('text limits count characters as SPEC.md and OpenAI do: an emoji is one character, not two', async (t) => {
  const emoji = (n: number) => '\u{1F600}'.repeat(n); // one character, two UTF-16 units each
  const created = await alice.post('/v1/conversations', { metadata: { [emoji(64)]: emoji(512) }, title: emoji(256), referrer: emoji(256) });
  t.is(created.status, 200, JSON.stringify(created.body));
  t.is(created.body.metadata[emoji(64)], emoji(512));
  t.is(created.body.title, emoji(256));
  const updated = await alice.patch(`/v1/conversations/${created.body.id}`, { metadata: { k: emoji(512) }, title: emoji(256) });
  t.is(updated.status, 200, JSON.stringify(updated.body));
  // One character more is still a 400 naming the field.
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { k: emoji(513) } }), 'metadata.k');
  assertBadRequest(t, await alice.post('/v1/conversations', { metadata: { [emoji(65)]: 'v' } }), `metadata.${emoji(65)}`);
  assertBadRequest(t, await alice.post('/v1/conversations', { title: emoji(257) }), 'title');
  assertBadRequest(t, await alice.post('/v1/conversations', { referrer: emoji(257) }), 'referrer');
});

test('an unknown field of a conversation body is a 400 naming it (create, update through POST and PATCH)', async (t) => {
  assertBadRequest(t, await alice.post('/v1/conversations', { metdata: { a: 'b' } }), 'metdata');
  assertBadRequest(t, await alice.post('/v1/conversations', { title: 'x', project: 'proj_x' }), 'project');
  const c = (await alice.post('/v1/conversations', { title: 'kept' })).body;
  for (const method of ['POST', 'PATCH']) {
    const r = await alice.call(method, `/v1/conversations/${c.id}`, { metdata: { a: 'b' } });
    assertBadRequest(t, r, 'metdata');
    t.regex(r.body.error.message, /^Unrecognized parameter\(s\) in the request body: metdata/);
  }
  t.like((await alice.get(`/v1/conversations/${c.id}`)).body, { title: 'kept', metadata: {} });
});

test.serial('a failed create leaves nothing behind (no row, no event)', async (t) => {
  const knex = svc.runtime.db.knex;
  const before = await knex('conversations').where({ user_id: alice.user.id }).count<{ count: number }[]>({ count: '*' });
  const eventsBefore = await knex('outbox_events').count<{ count: number }[]>({ count: '*' });
  assertBadRequest(t, await alice.post('/v1/conversations', { items: [text('fine'), { type: 'function_call', name: 'f' }] }), 'items[1].call_id');
  const after = await knex('conversations').where({ user_id: alice.user.id }).count<{ count: number }[]>({ count: '*' });
  const eventsAfter = await knex('outbox_events').count<{ count: number }[]>({ count: '*' });
  t.is(Number(after[0]!.count), Number(before[0]!.count));
  t.is(Number(eventsAfter[0]!.count), Number(eventsBefore[0]!.count));
});

test('initial items go to MAIN in order and emit one message.sent per user/assistant item', async (t) => {
  const r = await alice.post('/v1/conversations', {
    items: [
      { type: 'message', role: 'system', content: 'be brief' },
      { type: 'message', role: 'user', content: 'hi' },
      { type: 'message', role: 'assistant', content: 'hello' },
    ],
  });
  t.is(r.status, 200);
  const list = await alice.get(`/v1/conversations/${r.body.id}/items?order=asc`);
  t.deepEqual(list.body.data.map((i: any) => [i.role, i.branch, i.sequence_number]), [
    ['system', 'MAIN', 1],
    ['user', 'MAIN', 2],
    ['assistant', 'MAIN', 3],
  ]);
  t.deepEqual(list.body.data[2].content, [{ type: 'output_text', text: 'hello', annotations: [] }]);
  const sent = await eventsOf(svc.runtime.db.knex, 'message.sent', r.body.id);
  t.deepEqual(sent.map((e) => e.role), ['user', 'assistant']);
  t.deepEqual(sent.map((e) => e.message_id), [list.body.data[1].id, list.body.data[2].id]);
});

test('a project_id of another user (or unknown) is a 404; an own project links', async (t) => {
  const own = await alice.post('/v1/projects', { name: 'Mine' });
  const foreign = await bob.post('/v1/projects', { name: 'Bobs' });
  assertNotFound(t, await alice.post('/v1/conversations', { project_id: foreign.body.id }), 'foreign project');
  const unknown = await alice.post('/v1/conversations', { project_id: 'proj_doesnotexist' });
  assertNotFound(t, unknown, 'unknown project');
  t.is(unknown.body.error.param, 'project_id', 'the 404 names the field that named the project');
  const linked = await alice.post('/v1/conversations', { project_id: own.body.id });
  t.is(linked.status, 200);
  t.is(linked.body.project_id, own.body.id);
  assertNotFound(t, await alice.patch(`/v1/conversations/${linked.body.id}`, { project_id: foreign.body.id }), 'relink to foreign');
});

test('list: newest activity first, limit/offset, has_more, total_count, project and referrer filters', async (t) => {
  const carol = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  const project = await carol.post('/v1/projects', { name: 'P' });
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) {
    const r = await carol.post('/v1/conversations', { title: `c${i}`, referrer: i % 2 ? 'odd' : 'even', project_id: i < 2 ? project.body.id : undefined });
    ids.push(r.body.id);
  }
  const all = await carol.get('/v1/conversations');
  t.is(all.status, 200);
  t.deepEqual(Object.keys(all.body).sort(), ['data', 'has_more', 'object', 'total_count']);
  t.is(all.body.object, 'list');
  t.is(all.body.total_count, 5);
  t.false(all.body.has_more);
  t.deepEqual(all.body.data.map((c: any) => c.id), [...ids].reverse());

  // Activity (a new item) moves a conversation to the front.
  await carol.post(`/v1/conversations/${ids[0]}/items`, { items: [text('bump')] });
  const bumped = await carol.get('/v1/conversations?limit=2');
  t.deepEqual(bumped.body.data.map((c: any) => c.id), [ids[0], ids[4]]);
  t.true(bumped.body.has_more);
  t.is(bumped.body.total_count, 5);
  const last = await carol.get('/v1/conversations?limit=2&offset=4');
  t.is(last.body.data.length, 1);
  t.false(last.body.has_more);

  const inProject = await carol.get(`/v1/conversations?project_id=${project.body.id}`);
  t.deepEqual(inProject.body.data.map((c: any) => c.id).sort(), [ids[0], ids[1]].sort());
  t.is(inProject.body.total_count, 2);
  const odd = await carol.get('/v1/conversations?referrer=odd');
  t.deepEqual(odd.body.data.map((c: any) => c.id).sort(), [ids[1], ids[3]].sort());

  assertBadRequest(t, await carol.get('/v1/conversations?limit=0'), 'limit');
  assertBadRequest(t, await carol.get('/v1/conversations?limit=101'), 'limit');
  assertBadRequest(t, await carol.get('/v1/conversations?limit=abc'), 'limit');
  assertBadRequest(t, await carol.get('/v1/conversations?offset=-1'), 'offset');
  // Other users never appear.
  const bobs = await bob.get('/v1/conversations?limit=100');
  t.false(bobs.body.data.some((c: any) => ids.includes(c.id)));
});

test('update through POST (the SDK form) and PATCH emits conversation.updated with changes {old, new}', async (t) => {
  const c = await alice.post('/v1/conversations', { title: 'Before', metadata: { a: '1' } });
  const id = c.body.id;
  const r1 = await alice.post(`/v1/conversations/${id}`, { metadata: { a: '2', b: 'x' } });
  t.is(r1.status, 200);
  t.deepEqual(r1.body.metadata, { a: '2', b: 'x' });
  const r2 = await alice.patch(`/v1/conversations/${id}`, { title: 'After' });
  t.is(r2.body.title, 'After');
  t.deepEqual(r2.body.metadata, { a: '2', b: 'x' }, 'PATCH without metadata keeps it');
  const r3 = await alice.patch(`/v1/conversations/${id}`, { title: 'After' });
  t.is(r3.status, 200, 'a no-op update answers the conversation');
  const r4 = await alice.post(`/v1/conversations/${id}`, { metadata: null });
  t.deepEqual(r4.body.metadata, {}, 'null metadata clears it');
  const events = await eventsOf(svc.runtime.db.knex, 'conversation.updated', id);
  t.is(events.length, 3, 'one event per effective change, none for the no-op');
  t.deepEqual(events[0], { conversation_id: id, changes: { metadata: { old: { a: '1' }, new: { a: '2', b: 'x' } } }, updated_at: events[0]!.updated_at });
  t.deepEqual(events[1]!.changes, { title: { old: 'Before', new: 'After' } });
  t.deepEqual(events[2]!.changes, { metadata: { old: { a: '2', b: 'x' }, new: {} } });
  t.regex(events[0]!.updated_at, ISO);
  assertBadRequest(t, await alice.post(`/v1/conversations/${id}`, { metadata: { x: 'y'.repeat(513) } }), 'metadata.x');
  assertBadRequest(t, await alice.patch(`/v1/conversations/${id}`, { title: 't'.repeat(257) }), 'title');
});

test('another user gets 404 on every route of a conversation, and nothing changes', async (t) => {
  const c = await alice.post('/v1/conversations', { title: 'secret', items: [text('private')] });
  const id = c.body.id;
  const item = (await alice.get(`/v1/conversations/${id}/items`)).body.data[0].id;
  const attempts: [string, () => Promise<{ status: number; body: any }>][] = [
    ['get', () => bob.get(`/v1/conversations/${id}`)],
    ['update', () => bob.post(`/v1/conversations/${id}`, { metadata: { x: 'y' } })],
    ['patch', () => bob.patch(`/v1/conversations/${id}`, { title: 'mine now' })],
    ['list items', () => bob.get(`/v1/conversations/${id}/items`)],
    ['create items', () => bob.post(`/v1/conversations/${id}/items`, { items: [text('intrude')] })],
    ['get item', () => bob.get(`/v1/conversations/${id}/items/${item}`)],
    ['delete item', () => bob.del(`/v1/conversations/${id}/items/${item}`)],
    ['edit item', () => bob.post(`/v1/conversations/${id}/items/${item}/edit`, { content: 'x' })],
    ['regenerate', () => bob.post(`/v1/conversations/${id}/items/${item}/regenerate`)],
    ['branches', () => bob.get(`/v1/conversations/${id}/branches`)],
    ['create branch', () => bob.post(`/v1/conversations/${id}/branches`, { name: 'x' })],
    ['get branch', () => bob.get(`/v1/conversations/${id}/branches/MAIN`)],
    ['activate', () => bob.post(`/v1/conversations/${id}/branches/MAIN/activate`)],
    ['delete', () => bob.del(`/v1/conversations/${id}`)],
  ];
  for (const [what, attempt] of attempts) assertNotFound(t, await attempt(), what);
  const still = await alice.get(`/v1/conversations/${id}`);
  t.is(still.body.title, 'secret');
  const items = await alice.get(`/v1/conversations/${id}/items`);
  t.is(items.body.data.length, 1);
  t.is((await eventsOf(svc.runtime.db.knex, 'conversation.updated', id)).length, 0);
  t.is((await eventsOf(svc.runtime.db.knex, 'conversation.deleted', id)).length, 0);
});

test('delete is soft: 404 everywhere afterwards, items stay stored, conversation.deleted has message_count', async (t) => {
  const c = await alice.post('/v1/conversations', { items: [text('one'), text('two'), { type: 'message', role: 'assistant', content: 'three' }] });
  const id = c.body.id;
  const item = (await alice.get(`/v1/conversations/${id}/items`)).body.data[0].id;
  const del = await alice.del(`/v1/conversations/${id}`);
  t.is(del.status, 200);
  t.deepEqual(del.body, { id, object: 'conversation.deleted', deleted: true });
  const attempts: [string, () => Promise<{ status: number; body: any }>][] = [
    ['get', () => alice.get(`/v1/conversations/${id}`)],
    ['update', () => alice.post(`/v1/conversations/${id}`, { metadata: {} })],
    ['list items', () => alice.get(`/v1/conversations/${id}/items`)],
    ['create items', () => alice.post(`/v1/conversations/${id}/items`, { items: [text('late')] })],
    ['get item', () => alice.get(`/v1/conversations/${id}/items/${item}`)],
    ['delete item', () => alice.del(`/v1/conversations/${id}/items/${item}`)],
    ['branches', () => alice.get(`/v1/conversations/${id}/branches`)],
    ['delete again', () => alice.del(`/v1/conversations/${id}`)],
  ];
  for (const [what, attempt] of attempts) assertNotFound(t, await attempt(), what);
  const list = await alice.get('/v1/conversations?limit=100');
  t.false(list.body.data.some((x: any) => x.id === id));
  const stored = await svc.runtime.db.knex('conversation_items').where({ conversation_id: id });
  t.is(stored.length, 3, 'items are not physically removed');
  const events = await eventsOf(svc.runtime.db.knex, 'conversation.deleted', id);
  t.is(events.length, 1);
  t.deepEqual(Object.keys(events[0]!).sort(), ['conversation_id', 'deleted_at', 'message_count', 'user_id']);
  t.is(events[0]!.message_count, 3);
  t.is(events[0]!.user_id, alice.user.id);
  t.regex(events[0]!.deleted_at, ISO);
});

test('requests without identity are 401 before any lookup', async (t) => {
  const res = await fetch(`${svc.url}/v1/conversations`, { headers: { 'x-gateway-token': svc.gatewaySecret } });
  t.is(res.status, 401);
});
