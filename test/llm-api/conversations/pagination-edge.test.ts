import test from 'ava';
import OpenAI from 'openai';
import { startTestPlatform, type TestPlatform } from '../../helpers/platform.js';

/**
 * Pagination and key creation as a client sees them, through the edge: the openai SDK still pages
 * items with its cursor; `offset` and `total_count` work beside it; an empty POST creates an API key
 * and the key list is paged.
 */
let p: TestPlatform;
let token: string;

async function edge(method: string, path: string, options: { body?: string; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, ...options.headers };
  const res = await fetch(p.url + path, { method, headers, body: options.body });
  return { status: res.status, body: (await res.json()) as any };
}

test.before(async () => {
  p = await startTestPlatform();
  token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as any).access_token;
  const up = await edge('POST', '/auth/upgrade', { body: JSON.stringify({ email: 'pager@example.com' }), headers: { 'content-type': 'application/json' } });
  if (up.status !== 200) throw new Error(JSON.stringify(up.body));
});
test.after.always(() => p?.stop());

test.serial('items: the SDK cursor visits every item once; offset and total_count through the edge', async (t) => {
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: token, maxRetries: 0 });
  const conv = await client.conversations.create({ items: ['1', '2', '3', '4', '5'].map((text) => ({ type: 'message' as const, role: 'user' as const, content: text })) });
  const seen: string[] = [];
  for await (const item of client.conversations.items.list(conv.id, { limit: 2, order: 'asc' })) seen.push(String(item.id));
  t.is(new Set(seen).size, 5);
  const page = await edge('GET', `/v1/conversations/${conv.id}/items?order=asc&limit=2&offset=3`);
  t.is(page.status, 200);
  t.deepEqual(page.body.data.map((i: any) => i.id), seen.slice(3));
  t.is(page.body.total_count, 5);
  t.false(page.body.has_more);
});

test.serial('API keys: POST with no body at all → 201; the list is paged', async (t) => {
  const first = await edge('POST', '/auth/api-keys');
  t.is(first.status, 201, JSON.stringify(first.body));
  t.regex(first.body.name, /^API key created /);
  await edge('POST', '/auth/api-keys', { body: '{"name":"second"}', headers: { 'content-type': 'application/json' } });
  const page = await edge('GET', '/auth/api-keys?limit=1&offset=1');
  t.is(page.body.total_count, 2);
  t.deepEqual(page.body.data.map((k: any) => k.name), ['second']);
  t.false(page.body.has_more);
});
