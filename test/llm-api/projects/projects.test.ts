import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { assertBadRequest, clientFor, eventsOf, type Client } from '../conversations/client.js';

let svc: TestService;
let alice: Client;
let bob: Client;
const clock = new ManualClock(Date.UTC(2026, 10, 22, 1, 0, 0));

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
  alice = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  bob = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
});
test.after.always(() => svc?.close());

test('create answers 201 with the SPEC.md 2.1 fields', async (t) => {
  const r = await alice.post('/v1/projects', { name: 'Research', instruction: 'Be thorough.' });
  t.is(r.status, 201, JSON.stringify(r.body));
  t.regex(r.body.id, /^proj_[0-9A-Za-z]{24}$/);
  t.deepEqual(r.body, {
    id: r.body.id,
    object: 'project',
    name: 'Research',
    instruction: 'Be thorough.',
    is_archived: false,
    is_favorite: false,
    archived_at: null,
    created_at: Math.floor(clock.now() / 1000),
    updated_at: Math.floor(clock.now() / 1000),
  });
  const bare = await alice.post('/v1/projects', { name: 'Bare' });
  t.is(bare.body.instruction, null);
});

test('validation: name required and at most 120 characters; instruction at most 32768', async (t) => {
  assertBadRequest(t, await alice.post('/v1/projects', {}), 'name');
  assertBadRequest(t, await alice.post('/v1/projects', { name: '' }), 'name');
  assertBadRequest(t, await alice.post('/v1/projects', { name: '   ' }), 'name');
  assertBadRequest(t, await alice.post('/v1/projects', { name: 5 }), 'name');
  assertBadRequest(t, await alice.post('/v1/projects', { name: 'n'.repeat(121) }), 'name');
  t.is((await alice.post('/v1/projects', { name: 'n'.repeat(120) })).status, 201);
  // Characters, not UTF-16 units: 120 emoji (240 units) are a name of 120 characters.
  const emoji = await alice.post('/v1/projects', { name: '\u{1F9A6}'.repeat(120) });
  t.is(emoji.status, 201, JSON.stringify(emoji.body));
  t.is(emoji.body.name, '\u{1F9A6}'.repeat(120));
  assertBadRequest(t, await alice.post('/v1/projects', { name: '\u{1F9A6}'.repeat(121) }), 'name');
  assertBadRequest(t, await alice.post('/v1/projects', { name: 'ok', instruction: 'i'.repeat(32769) }), 'instruction');
  t.is((await alice.post('/v1/projects', { name: 'ok', instruction: 'i'.repeat(32768) })).status, 201);
  const p = await alice.post('/v1/projects', { name: 'patchme' });
  assertBadRequest(t, await alice.patch(`/v1/projects/${p.body.id}`, { name: 'n'.repeat(121) }), 'name');
  assertBadRequest(t, await alice.patch(`/v1/projects/${p.body.id}`, { is_archived: 'yes' }), 'is_archived');
  assertBadRequest(t, await alice.patch(`/v1/projects/${p.body.id}`, { is_favorite: 1 }), 'is_favorite');
  assertBadRequest(t, await alice.patch(`/v1/projects/${p.body.id}`, { instruction: 'i'.repeat(32769) }), 'instruction');
  assertBadRequest(t, await alice.get('/v1/projects?is_archived=maybe'), 'is_archived');
  assertBadRequest(t, await alice.get('/v1/projects?limit=0'), 'limit');
});

test('an unknown field is a 400 naming it, on create and on patch, and changes nothing', async (t) => {
  const unknown = (r: { status: number; body: any }, field: string) => {
    assertBadRequest(t, r, field);
    t.regex(r.body.error.message, new RegExp(`Unrecognized parameter\\(s\\) in the request body: ${field}`));
  };
  unknown(await alice.post('/v1/projects', { name: 'Typo', instructions: 'a typo of instruction' }), 'instructions');
  t.false((await alice.get('/v1/projects?limit=100')).body.data.some((p: { name: string }) => p.name === 'Typo'), 'nothing created');
  const p = (await alice.post('/v1/projects', { name: 'Strict' })).body;
  unknown(await alice.patch(`/v1/projects/${p.id}`, { archived: true }), 'archived');
  unknown(await alice.patch(`/v1/projects/${p.id}`, { is_favorite: true, favourite: true }), 'favourite');
  const after = (await alice.get(`/v1/projects/${p.id}`)).body;
  t.like(after, { is_archived: false, is_favorite: false, updated_at: p.updated_at });
  t.is((await alice.patch(`/v1/projects/${p.id}`, {})).status, 200, 'an empty patch is still allowed');
});

test.serial('patch: archive sets archived_at, unarchive clears it; favourite; name and instruction', async (t) => {
  const p = (await alice.post('/v1/projects', { name: 'Flags', instruction: 'x' })).body;
  clock.advance(60_000);
  const archived = await alice.patch(`/v1/projects/${p.id}`, { is_archived: true });
  t.is(archived.status, 200);
  t.true(archived.body.is_archived);
  t.is(archived.body.archived_at, Math.floor(clock.now() / 1000));
  t.is(archived.body.updated_at, Math.floor(clock.now() / 1000));
  t.is(archived.body.created_at, p.created_at);
  clock.advance(60_000);
  const again = await alice.patch(`/v1/projects/${p.id}`, { is_archived: true });
  t.is(again.body.archived_at, archived.body.archived_at, 'archiving twice keeps the first archived_at');
  const unarchived = await alice.patch(`/v1/projects/${p.id}`, { is_archived: false });
  t.false(unarchived.body.is_archived);
  t.is(unarchived.body.archived_at, null);
  const fav = await alice.patch(`/v1/projects/${p.id}`, { is_favorite: true, name: 'Renamed', instruction: null });
  t.true(fav.body.is_favorite);
  t.is(fav.body.name, 'Renamed');
  t.is(fav.body.instruction, null);
  const got = await alice.get(`/v1/projects/${p.id}`);
  t.deepEqual(got.body, fav.body);
});

test('list: paginated like conversations, newest activity first, is_archived / is_favorite filters', async (t) => {
  const dave = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  const made: any[] = [];
  for (let i = 0; i < 5; i++) made.push((await dave.post('/v1/projects', { name: `p${i}` })).body);
  await dave.patch(`/v1/projects/${made[1].id}`, { is_archived: true });
  await dave.patch(`/v1/projects/${made[2].id}`, { is_favorite: true });
  const all = await dave.get('/v1/projects');
  t.deepEqual(Object.keys(all.body).sort(), ['data', 'has_more', 'object', 'total_count']);
  t.is(all.body.total_count, 5);
  t.deepEqual(all.body.data.map((p: any) => p.name), ['p2', 'p1', 'p4', 'p3', 'p0']);
  const page = await dave.get('/v1/projects?limit=2&offset=2');
  t.deepEqual(page.body.data.map((p: any) => p.name), ['p4', 'p3']);
  t.true(page.body.has_more);
  t.deepEqual((await dave.get('/v1/projects?is_archived=true')).body.data.map((p: any) => p.name), ['p1']);
  t.is((await dave.get('/v1/projects?is_archived=false')).body.total_count, 4);
  t.deepEqual((await dave.get('/v1/projects?is_favorite=true')).body.data.map((p: any) => p.name), ['p2']);
  t.is((await dave.get('/v1/projects?is_favorite=true&is_archived=true')).body.total_count, 0);
});

test('ownership: another user gets 404 on get, patch and delete; lists are per user', async (t) => {
  const p = (await alice.post('/v1/projects', { name: 'Private' })).body;
  for (const r of [await bob.get(`/v1/projects/${p.id}`), await bob.patch(`/v1/projects/${p.id}`, { name: 'x' }), await bob.del(`/v1/projects/${p.id}`)]) {
    t.is(r.status, 404);
    t.is(r.body.error.type, 'not_found_error');
  }
  t.is((await alice.get(`/v1/projects/${p.id}`)).body.name, 'Private');
  const bobs = await bob.get('/v1/projects?limit=100');
  t.false(bobs.body.data.some((x: any) => x.id === p.id));
  t.is((await alice.get('/v1/projects/proj_unknown')).status, 404);
});

test('delete is soft: 404 afterwards; its conversations keep existing but lose the link (conversation.updated)', async (t) => {
  const p = (await alice.post('/v1/projects', { name: 'Doomed' })).body;
  const c1 = (await alice.post('/v1/conversations', { project_id: p.id })).body;
  const c2 = (await alice.post('/v1/conversations', { project_id: p.id })).body;
  const del = await alice.del(`/v1/projects/${p.id}`);
  t.is(del.status, 200);
  t.deepEqual(del.body, { id: p.id, object: 'project.deleted', deleted: true });
  t.is((await alice.get(`/v1/projects/${p.id}`)).status, 404);
  t.is((await alice.patch(`/v1/projects/${p.id}`, { name: 'back' })).status, 404);
  t.is((await alice.del(`/v1/projects/${p.id}`)).status, 404);
  t.false((await alice.get('/v1/projects?limit=100')).body.data.some((x: any) => x.id === p.id));
  for (const c of [c1, c2]) {
    const got = await alice.get(`/v1/conversations/${c.id}`);
    t.is(got.status, 200);
    t.is(got.body.project_id, null);
    const events = await eventsOf(svc.runtime.db.knex, 'conversation.updated', c.id);
    t.is(events.length, 1);
    t.deepEqual(events[0]!.changes, { project_id: { old: p.id, new: null } });
  }
  t.is((await alice.get(`/v1/conversations?project_id=${p.id}`)).body.total_count, 0);
  t.is((await alice.post('/v1/conversations', { project_id: p.id })).status, 404, 'a deleted project cannot be linked');
  t.is((await svc.runtime.db.knex('projects').where({ id: p.id })).length, 1, 'the row stays');
});
