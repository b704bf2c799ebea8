import test from 'ava';
import OpenAI from 'openai';
import type { TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { assertBadRequest, startWithUser, text, type Client } from './client.js';

/**
 * The list envelope on every paged list: `limit`/`offset` in, `has_more` and `total_count` out.
 * Items keep the cursor (`after`, `order`) the openai SDK pages with, and add `offset`/`total_count`.
 * API keys and the admin provider list honour `limit`/`offset` too.
 */
let svc: TestService;
let alice: Client;

test.before(async () => ({ svc, alice } = await startWithUser()));
test.after.always(() => svc?.close());

test('items: offset skips, total_count counts the whole branch, after and order still work', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  await alice.post(`/v1/conversations/${id}/items`, { items: ['a', 'b', 'c', 'd', 'e'].map(text) });
  const all = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100`)).body;
  t.is(all.total_count, 5);
  const ids: string[] = all.data.map((i: any) => i.id);

  const page = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=2&offset=2`)).body;
  t.deepEqual(page.data.map((i: any) => i.id), ids.slice(2, 4));
  t.true(page.has_more);
  t.is(page.total_count, 5);

  const last = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=2&offset=4`)).body;
  t.deepEqual(last.data.map((i: any) => i.id), ids.slice(4));
  t.false(last.has_more);

  const cursor = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=2&after=${ids[0]}`)).body;
  t.deepEqual(cursor.data.map((i: any) => i.id), ids.slice(1, 3));
  t.is(cursor.total_count, 5);

  const desc = (await alice.get(`/v1/conversations/${id}/items?limit=1&offset=1`)).body;
  t.deepEqual(desc.data.map((i: any) => i.id), [ids[3]]);

  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?offset=-1`), 'offset');
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?offset=abc`), 'offset');
});

test('API keys: an empty POST creates a named key; the list honours limit/offset with has_more and total_count', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const headers = edgeHeaders(svc.gatewaySecret, user);
  // No body at all, as the spec allows: only the bearer token is required.
  const empty = await fetch(`${svc.url}/auth/api-keys`, { method: 'POST', headers });
  t.is(empty.status, 201);
  const created = (await empty.json()) as { name: string; key: string };
  t.regex(created.name, /^API key created \d{4}-\d\d-\d\d$/);
  t.regex(created.key, /^sk_/);
  const emptyJson = await fetch(`${svc.url}/auth/api-keys`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: '{}' });
  t.is(emptyJson.status, 201);
  await fetch(`${svc.url}/auth/api-keys`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: '{"name":"third"}' });

  const list = async (query: string) => (await (await fetch(`${svc.url}/auth/api-keys${query}`, { headers })).json()) as any;
  const first = await list('?limit=2');
  t.is(first.data.length, 2);
  t.true(first.has_more);
  t.is(first.total_count, 3);
  const second = await list('?limit=2&offset=2');
  t.deepEqual(second.data.map((k: any) => k.name), ['third']);
  t.false(second.has_more);
  const bad = await fetch(`${svc.url}/auth/api-keys?limit=0`, { headers });
  t.is(bad.status, 400);
  t.is(((await bad.json()) as any).error.param, 'limit');
});

test('admin providers: limit/offset, has_more and total_count', async (t) => {
  const admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  const headers = { ...edgeHeaders(svc.gatewaySecret, admin), 'content-type': 'application/json' };
  for (const name of ['P1', 'P2', 'P3']) {
    // Names that do not resolve: stored (checked again at every call), never called successfully; the sync error is not the point here.
    await fetch(`${svc.url}/v1/admin/providers`, { method: 'POST', headers, body: JSON.stringify({ name, vendor: 'fake', base_url: `http://${name.toLowerCase()}.provider.invalid/v1` }) });
  }
  const page = (await (await fetch(`${svc.url}/v1/admin/providers?limit=2&offset=1`, { headers })).json()) as any;
  t.is(page.object, 'list');
  t.is(page.data.length, 2);
  t.is(page.total_count, 3);
  t.false(page.has_more);
  const head = (await (await fetch(`${svc.url}/v1/admin/providers?limit=1`, { headers })).json()) as any;
  t.true(head.has_more);
});

test('items: a cursor naming an item deleted since continues from where it stood (asc and desc), even after later deletes', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const ids: string[] = (await alice.post(`/v1/conversations/${id}/items`, { items: ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map(text) })).body.data.map((i: any) => i.id);
  const page = (query: string) => alice.get(`/v1/conversations/${id}/items?${query}`);
  const idsOf = (r: { body: any }) => r.body.data.map((i: any) => i.id);

  const first = await page('order=asc&limit=2');
  t.deepEqual(idsOf(first), ids.slice(0, 2));
  t.is((await alice.del(`/v1/conversations/${id}/items/${first.body.last_id}`)).status, 200);
  const next = await page(`order=asc&limit=2&after=${first.body.last_id}`);
  t.is(next.status, 200, JSON.stringify(next.body));
  t.deepEqual(idsOf(next), [ids[2], ids[3]], 'asc: the items after the deleted one, none skipped, none repeated');
  t.true(next.body.has_more);

  const newest = await page('limit=2');
  t.deepEqual(idsOf(newest), [ids[6], ids[5]]);
  t.is((await alice.del(`/v1/conversations/${id}/items/${newest.body.last_id}`)).status, 200);
  const older = await page(`limit=2&after=${newest.body.last_id}`);
  t.is(older.status, 200, JSON.stringify(older.body));
  t.deepEqual(idsOf(older), [ids[4], ids[3]], 'desc: the items before the deleted one');
  t.is(older.body.first_id, ids[4]);
  t.is(older.body.last_id, ids[3]);
  t.true(older.body.has_more);

  // b was deleted two MAINs ago (MAIN_backup_1 holds it, MAIN_backup_2 does not): still placed.
  t.deepEqual(idsOf(await page(`order=asc&limit=10&after=${ids[1]}`)), [ids[2], ids[3], ids[4], ids[6]]);
  t.deepEqual(idsOf(await page(`order=desc&limit=10&after=${ids[1]}`)), [ids[0]]);
  // The first item deleted: nothing is older, everything else is newer.
  t.is((await alice.del(`/v1/conversations/${id}/items/${ids[0]}`)).status, 200);
  const none = await page(`order=desc&after=${ids[0]}`);
  t.is(none.status, 200);
  t.deepEqual(none.body, { object: 'list', data: [], first_id: null, last_id: null, has_more: false, total_count: 4 });
  t.deepEqual(idsOf(await page(`order=asc&after=${ids[0]}`)), [ids[2], ids[3], ids[4], ids[6]]);
});

test('the openai SDK auto-pagination goes on past an item deleted while it pages, in both orders', async (t) => {
  const sdk = new OpenAI({ baseURL: `${svc.url}/v1`, apiKey: 'unused', defaultHeaders: { ...edgeHeaders(svc.gatewaySecret, alice.user), authorization: null }, maxRetries: 0 });
  const conv = await sdk.conversations.create({ items: ['1', '2', '3', '4', '5', '6'].map((content) => ({ type: 'message' as const, role: 'user' as const, content })) });
  const all = (await sdk.conversations.items.list(conv.id, { order: 'asc' })).data.map((i) => i.id!);
  for (const order of ['asc', 'desc'] as const) {
    const seen: string[] = [];
    for await (const item of sdk.conversations.items.list(conv.id, { order, limit: 2 })) {
      seen.push(item.id!);
      // The last item of the first page goes while the client holds it as its cursor.
      if (seen.length === 2) await sdk.conversations.items.delete(item.id!, { conversation_id: conv.id });
    }
    const expected = order === 'asc' ? [...all] : [...all].reverse();
    t.deepEqual(seen, expected, `${order}: every item once, none skipped`);
    all.splice(all.indexOf(seen[1]!), 1);
  }
});

// Serial: the lock below must hold up this test's request alone, not another test's of this file.
test.serial('items: a page is read in one snapshot: a branch deleted while its page is read answers as it was, not as an empty page', async (t) => {
  const knex = svc.runtime.db.knex;
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const ids: string[] = (await alice.post(`/v1/conversations/${id}/items`, { items: ['a', 'b', 'c'].map(text) })).body.data.map((i: any) => i.id);
  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'side' })).status, 201);
  const side = (await knex('conversation_branches').where({ conversation_id: id, name: 'side' }).first('id')) as { id: number };
  // The branch goes (as DELETE …/branches/side does) between the list's first reads and its page:
  // the page's read of the references waits on this lock until the delete has committed.
  const trx = await knex.transaction();
  try {
    const pid = Number((await trx.raw('select pg_backend_pid() as pid')).rows[0].pid);
    await trx.raw('lock table branch_items in access exclusive mode');
    const listing = alice.get(`/v1/conversations/${id}/items?branch=side&order=asc`);
    await waitFor(async () => Number((await knex.raw('select count(*) as n from pg_stat_activity where ? = any(pg_blocking_pids(pid))', [pid])).rows[0].n) > 0, 10_000, 'the page waiting on the lock');
    await trx('branch_items').where({ branch_id: side.id }).delete();
    await trx('conversation_branches').where({ id: side.id }).delete();
    await trx.commit();
    const r = await listing;
    t.is(r.status, 200, JSON.stringify(r.body));
    t.deepEqual(r.body.data.map((i: any) => i.id), ids, 'the branch as it was when the list began');
    t.is(r.body.total_count, 3);
  } finally {
    if (!trx.isCompleted()) await trx.rollback();
  }
  t.is((await alice.get(`/v1/conversations/${id}/items?branch=side`)).status, 404, 'and gone for the next request');
});

test('items: a cursor the branch cannot place is a 400 naming after (erased for good, or another branch’s own item), never a restart', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const ids: string[] = (await alice.post(`/v1/conversations/${id}/items`, { items: ['a', 'b', 'c'].map(text) })).body.data.map((i: any) => i.id);
  const deleted = (await alice.del(`/v1/conversations/${id}/items/${ids[1]}`)).body;
  t.is((await alice.del(`/v1/conversations/${id}/branches/${deleted.old_main_backup}`)).status, 200);
  const erased = await alice.get(`/v1/conversations/${id}/items?order=asc&after=${ids[1]}`);
  assertBadRequest(t, erased, 'after');
  t.regex(erased.body.error.message, /list again without 'after'/);

  t.is((await alice.post(`/v1/conversations/${id}/branches`, { name: 'side' })).status, 201);
  await alice.post(`/v1/conversations/${id}/branches/side/activate`);
  const own = (await alice.post(`/v1/conversations/${id}/items`, { items: [text('side only')] })).body.data[0].id as string;
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?branch=MAIN&after=${own}`), 'after');
  t.is((await alice.get(`/v1/conversations/${id}/items?branch=side&after=${own}`)).status, 200);
});

test('items: a cursor deleted from MAIN is placed while the chain of backups back to it is whole; deleting a backup between cuts it (400)', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const ids: string[] = (await alice.post(`/v1/conversations/${id}/items`, { items: ['a', 'b', 'c', 'd'].map(text) })).body.data.map((i: any) => i.id);
  const page = (query: string) => alice.get(`/v1/conversations/${id}/items?${query}`);
  const first = (await alice.del(`/v1/conversations/${id}/items/${ids[1]}`)).body.old_main_backup as string; // holds b
  const between = (await alice.del(`/v1/conversations/${id}/items/${ids[3]}`)).body.old_main_backup as string; // holds no b
  t.deepEqual((await page(`order=asc&after=${ids[1]}`)).body.data.map((i: any) => i.id), [ids[2]], 'MAIN → the backup between → the one holding b');
  // The backup between goes: MAIN has no parent any more, although b is still stored (on the first backup).
  t.is((await alice.del(`/v1/conversations/${id}/branches/${between}`)).status, 200);
  const cut = await page(`order=asc&after=${ids[1]}`);
  assertBadRequest(t, cut, 'after');
  t.regex(cut.body.error.message, /list again without 'after'/);
  t.is((await page(`branch=${first}&order=asc&after=${ids[1]}`)).status, 200, 'the branch that holds it still pages after it');
});
