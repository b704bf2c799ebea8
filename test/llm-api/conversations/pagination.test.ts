import test from 'ava';
import type { TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders } from '../../helpers/users.js';
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
