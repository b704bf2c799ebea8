import test from 'ava';
import OpenAI from 'openai';
import { startTestPlatform, type TestPlatform } from '../../helpers/platform.js';

// The official openai SDK (client.conversations.*) through the embedded edge (deck/kong.yaml),
// with real credentials: an API key of a permanent account (X-API-Key) and a guest bearer token.
let p: TestPlatform;
let alice: OpenAI;
let bob: OpenAI;
let aliceKey: string;

async function edge(method: string, path: string, options: { token?: string; body?: unknown } = {}) {
  const headers: Record<string, string> = {};
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(p.url + path, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  return { status: res.status, body: (await res.json()) as any };
}

test.before(async () => {
  p = await startTestPlatform();
  // Alice: guest → permanent account → API key, used through X-API-Key only.
  const login = await edge('POST', '/llm/auth/guest-login');
  const up = await edge('POST', '/auth/upgrade', { token: login.body.access_token, body: { email: 'alice-sdk@example.com' } });
  if (up.status !== 200) throw new Error(`upgrade: ${JSON.stringify(up.body)}`);
  const refreshed = await edge('POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  const key = await edge('POST', '/auth/api-keys', { token: refreshed.body.access_token, body: { name: 'sdk' } });
  if (key.status !== 201) throw new Error(`api key: ${JSON.stringify(key.body)}`);
  aliceKey = key.body.key;
  alice = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', defaultHeaders: { 'x-api-key': aliceKey, authorization: null }, maxRetries: 0 });
  // Bob: a guest, through the bearer token the SDK sends as its apiKey.
  const bobLogin = await edge('POST', '/llm/auth/guest-login');
  bob = new OpenAI({ baseURL: `${p.url}/llm/v1`, apiKey: bobLogin.body.access_token, maxRetries: 0 });
});
test.after.always(() => p?.stop());

test.serial('create, retrieve, update and delete a conversation with the SDK', async (t) => {
  const conv = await alice.conversations.create({
    metadata: { topic: 'demo' },
    items: [{ type: 'message', role: 'user', content: 'Hello!' }],
  });
  t.regex(conv.id, /^conv_/);
  t.is(conv.object, 'conversation');
  t.deepEqual(conv.metadata, { topic: 'demo' });
  t.true(Number.isInteger(conv.created_at));

  const got = await alice.conversations.retrieve(conv.id);
  t.is(got.id, conv.id);
  const updated = await alice.conversations.update(conv.id, { metadata: { topic: 'changed', lang: 'en' } });
  t.deepEqual(updated.metadata, { topic: 'changed', lang: 'en' });

  const items = await alice.conversations.items.list(conv.id);
  t.is(items.data.length, 1);
  const first = items.data[0]!;
  t.is(first.type, 'message');
  if (first.type === 'message') t.deepEqual(first.content, [{ type: 'input_text', text: 'Hello!' }]);

  const deleted = await alice.conversations.delete(conv.id);
  t.deepEqual(deleted, { id: conv.id, object: 'conversation.deleted', deleted: true });
  const error = await t.throwsAsync(alice.conversations.retrieve(conv.id));
  t.true(error instanceof OpenAI.NotFoundError);
  await t.throwsAsync(alice.conversations.items.list(conv.id), { instanceOf: OpenAI.NotFoundError });
});

test.serial('items: create, retrieve (with include), delete (answers the conversation)', async (t) => {
  const conv = await alice.conversations.create({});
  const created = await alice.conversations.items.create(
    conv.id,
    {
      items: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What is 2+2?' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: '4', annotations: [], logprobs: [{ token: '4', logprob: -0.1, bytes: [52], top_logprobs: [] }] }] } as any,
        { type: 'function_call', call_id: 'call_1', name: 'calc', arguments: '{"x":2}' },
        { type: 'function_call_output', call_id: 'call_1', output: '4' },
      ],
    },
    { query: { include: ['message.output_text.logprobs'] } },
  );
  t.is(created.object, 'list');
  t.is(created.data.length, 4);
  t.is(created.first_id, created.data[0]!.id!);
  t.is(created.last_id, created.data[3]!.id!);
  t.false(created.has_more);

  const assistantId = created.data[1]!.id!;
  const plain = (await alice.conversations.items.retrieve(assistantId, { conversation_id: conv.id })) as any;
  t.false('logprobs' in plain.content[0]);
  const withLogprobs = (await alice.conversations.items.retrieve(assistantId, { conversation_id: conv.id, include: ['message.output_text.logprobs'] })) as any;
  t.deepEqual(withLogprobs.content[0].logprobs, [{ token: '4', logprob: -0.1, bytes: [52], top_logprobs: [] }]);
  const call = (await alice.conversations.items.retrieve(created.data[2]!.id!, { conversation_id: conv.id })) as any;
  t.like(call, { type: 'function_call', call_id: 'call_1', name: 'calc', arguments: '{"x":2}' });

  const afterDelete = await alice.conversations.items.delete(created.data[0]!.id!, { conversation_id: conv.id });
  t.is(afterDelete.id, conv.id);
  t.is(afterDelete.object, 'conversation');
  await t.throwsAsync(alice.conversations.items.retrieve(created.data[0]!.id!, { conversation_id: conv.id }), { instanceOf: OpenAI.NotFoundError });
  const remaining = await alice.conversations.items.list(conv.id, { order: 'asc' });
  t.deepEqual(remaining.data.map((i) => i.id), created.data.slice(1).map((i) => i.id));
});

test.serial('auto-pagination over 250 items visits each exactly once, in both orders', async (t) => {
  const conv = await alice.conversations.create({});
  const ids: string[] = [];
  for (let i = 0; i < 250; i += 20) {
    const batch = Array.from({ length: Math.min(20, 250 - i) }, (_, j) => ({ type: 'message' as const, role: 'user' as const, content: `m${i + j}` }));
    const r = await alice.conversations.items.create(conv.id, { items: batch });
    ids.push(...r.data.map((x) => x.id!));
  }
  t.is(ids.length, 250);
  const asc: string[] = [];
  for await (const item of alice.conversations.items.list(conv.id, { order: 'asc', limit: 20 })) asc.push(item.id!);
  t.deepEqual(asc, ids);
  const desc: string[] = [];
  for await (const item of alice.conversations.items.list(conv.id, { limit: 50 })) desc.push(item.id!);
  t.deepEqual(desc, [...ids].reverse(), 'default order desc; 250 = 5 full pages, no empty extra page');
  let page = await alice.conversations.items.list(conv.id, { limit: 50 });
  let pages = 1;
  while (page.hasNextPage()) {
    page = await page.getNextPage();
    pages++;
  }
  t.is(pages, 5);
});

test.serial('ownership through the edge: the other user gets NotFoundError on every SDK call', async (t) => {
  const conv = await alice.conversations.create({ items: [{ type: 'message', role: 'user', content: 'private' }] });
  const itemId = (await alice.conversations.items.list(conv.id)).data[0]!.id!;
  await t.throwsAsync(bob.conversations.retrieve(conv.id), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.update(conv.id, { metadata: { x: 'y' } }), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.items.list(conv.id), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.items.create(conv.id, { items: [{ type: 'message', role: 'user', content: 'x' }] }), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.items.retrieve(itemId, { conversation_id: conv.id }), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.items.delete(itemId, { conversation_id: conv.id }), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(bob.conversations.delete(conv.id), { instanceOf: OpenAI.NotFoundError });
  t.deepEqual((await alice.conversations.retrieve(conv.id)).metadata, {});
  // Bob's own conversation works through the /llm/v1 prefix.
  const own = await bob.conversations.create({ metadata: { mine: 'yes' } });
  t.is((await bob.conversations.retrieve(own.id)).id, own.id);
});

test.serial('limit errors reach the SDK as BadRequestError with param', async (t) => {
  const tooMany = Array.from({ length: 21 }, () => ({ type: 'message' as const, role: 'user' as const, content: 'x' }));
  const e1 = await t.throwsAsync(alice.conversations.create({ items: tooMany }), { instanceOf: OpenAI.BadRequestError });
  t.is((e1 as InstanceType<typeof OpenAI.BadRequestError>).param, 'items');
  const metadata = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
  const e2 = await t.throwsAsync(alice.conversations.create({ metadata }), { instanceOf: OpenAI.BadRequestError });
  t.is((e2 as InstanceType<typeof OpenAI.BadRequestError>).param, 'metadata');
  const conv = await alice.conversations.create({});
  const e3 = await t.throwsAsync(alice.conversations.items.list(conv.id, { limit: 101 }), { instanceOf: OpenAI.BadRequestError });
  t.is((e3 as InstanceType<typeof OpenAI.BadRequestError>).param, 'limit');
  // Without any credential the edge refuses before llm-api.
  const anonymous = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'not-a-credential', maxRetries: 0 });
  await t.throwsAsync(anonymous.conversations.create({}), { instanceOf: OpenAI.AuthenticationError });
});
