import test from 'ava';
import OpenAI from 'openai';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { createTestUser } from '../helpers/users.js';

// Every endpoint family the official `openai` SDK has a method for, through the edge, checked for
// what the SDK reads: object types and fields, pagination cursors (auto-pagination must end and
// yield every item once, in order), error classes with `param`, retry headers and request ids.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const MODEL = 'sweep-model';
let p: TestPlatform;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'sweep', models: [{ id: MODEL }] });
  p = await startTestPlatform({ clock: offsetClock(offsetToNextMinute()), env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', TEST_LOG_LEVEL: 'silent' } });
  await keyClient(p, ADMIN_KEY).post('/admin/providers', { body: { name: 'Sweep', vendor: 'fake', base_url: fake.url } });
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
});

const answer = () => `Hello from ${fake.name} w1 w2 w3 w4`;

async function newKey(limits?: { requests_per_minute?: number }): Promise<string> {
  const user = await createTestUser(p.runtime.db.knex);
  const created = (await keyClient(p, ADMIN_KEY).post('/admin/api-keys', { body: { user_id: user.id, name: 'sweep', tier: 'pro', ...(limits ? { limits } : {}) } })) as { key: string };
  return created.key;
}
async function sdk(): Promise<OpenAI> {
  return new OpenAI({ baseURL: `${p.url}/v1`, apiKey: await newKey(), maxRetries: 0 });
}

/** An SDK object without the fields its parsing helpers add (`parsed`, `parsed_arguments`). */
const withoutParsed = (value: unknown) => JSON.parse(JSON.stringify(value, (key, v) => (key === 'parsed' || key === 'parsed_arguments' ? undefined : v)));

async function collect<T>(iterable: AsyncIterable<T>, cap = 200): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) {
    out.push(item);
    if (out.length > cap) throw new Error(`auto-pagination did not end after ${cap} items`);
  }
  return out;
}

test.serial('models: list and retrieve parse; an unknown model is NotFoundError with a request id', async (t) => {
  const client = await sdk();
  t.truthy((await client.models.list().withResponse()).request_id);
  const models = await collect(client.models.list());
  const mine = models.find((m) => m.id === MODEL);
  t.like(mine, { object: 'model', id: MODEL });
  t.is(typeof mine!.created, 'number');
  t.is(typeof mine!.owned_by, 'string');
  const one = await client.models.retrieve(MODEL);
  t.like(one, { object: 'model', id: MODEL });
  t.truthy(one._request_id);
  const missing = await t.throwsAsync(client.models.retrieve('no-such-model'), { instanceOf: OpenAI.NotFoundError });
  t.truthy(missing!.requestID);
});

test.serial('chat completions: JSON and stream with tools, with store; a bad field is BadRequestError naming it', async (t) => {
  const client = await sdk();
  const tools: OpenAI.Chat.ChatCompletionTool[] = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  ];
  const json = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools });
  t.is(json.object, 'chat.completion');
  t.truthy(json._request_id);
  t.is(json.choices[0]!.finish_reason, 'tool_calls');
  const call = json.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  t.is(call.type, 'function');
  t.is(call.function.name, 'get_weather');
  t.notThrows(() => JSON.parse(call.function.arguments));

  // The SDK's stream helper assembles the tool call from its deltas.
  const runner = client.chat.completions.stream({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools });
  const final = await runner.finalChatCompletion();
  const streamedCall = final.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  t.is(streamedCall.function.name, 'get_weather');
  t.notThrows(() => JSON.parse(streamedCall.function.arguments));

  const stored = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'keep me' }], store: true });
  t.is(stored.choices[0]!.message.content, answer());
  const streamed = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'keep me too' }], store: true, stream: true });
  let text = '';
  for await (const chunk of streamed) {
    t.is(chunk.object, 'chat.completion.chunk');
    text += chunk.choices[0]?.delta.content ?? '';
  }
  t.is(text, answer());

  const bad = await t.throwsAsync(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 9 }), { instanceOf: OpenAI.BadRequestError });
  t.is(bad!.param, 'temperature');
  t.truthy(bad!.requestID);
  const noModel = await t.throwsAsync(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }));
  t.true(noModel instanceof OpenAI.NotFoundError || noModel instanceof OpenAI.BadRequestError, String(noModel));
});

test.serial('conversations: create, retrieve, update, delete, with the shapes and errors the SDK reads', async (t) => {
  const client = await sdk();
  const created = await client.conversations.create({ metadata: { a: '1' } });
  t.is(created.object, 'conversation');
  t.regex(created.id, /^conv_/);
  t.is(typeof created.created_at, 'number');
  t.truthy(created._request_id);
  t.like(await client.conversations.retrieve(created.id), { id: created.id, object: 'conversation', metadata: { a: '1' } });
  t.like(await client.conversations.update(created.id, { metadata: { a: '2' } }), { id: created.id, metadata: { a: '2' } });
  const bad = await t.throwsAsync(client.conversations.update(created.id, { metadata: 'nope' as any }), { instanceOf: OpenAI.BadRequestError });
  t.is(bad!.param, 'metadata');
  t.like(await client.conversations.delete(created.id), { id: created.id, object: 'conversation.deleted', deleted: true });
  await t.throwsAsync(client.conversations.retrieve(created.id), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(client.conversations.delete(created.id), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(client.conversations.retrieve('conv_nope'), { instanceOf: OpenAI.NotFoundError });
});

test.serial('conversation items: auto-pagination over several pages ends and yields every item once, in order, asc and desc', async (t) => {
  const client = await sdk();
  const conversation = await client.conversations.create({});
  const texts = Array.from({ length: 7 }, (_, i) => `item ${i}`);
  const ids: string[] = [];
  for (const chunk of [texts.slice(0, 3), texts.slice(3)]) {
    const added = await client.conversations.items.create(conversation.id, { items: chunk.map((text) => ({ type: 'message' as const, role: 'user' as const, content: text })) });
    t.is(added.object, 'list');
    t.is(added.data.length, chunk.length);
    t.is(added.first_id, added.data[0]!.id!);
    t.is(added.last_id, added.data.at(-1)!.id!);
    ids.push(...added.data.map((item) => item.id!));
  }
  t.is(new Set(ids).size, 7);

  const firstPage = await client.conversations.items.list(conversation.id, { order: 'asc', limit: 2 });
  t.true(firstPage.has_more);
  t.is(firstPage.last_id, ids[1]);
  t.like(await client.get(`/conversations/${conversation.id}/items`, { query: { order: 'asc', limit: 2 } }), { object: 'list', first_id: ids[0], last_id: ids[1], has_more: true });

  for (const limit of [1, 2, 3, 7, 20]) {
    const asc = await collect(client.conversations.items.list(conversation.id, { order: 'asc', limit }));
    t.deepEqual(asc.map((i) => i.id), ids, `asc, limit ${limit}`);
    const desc = await collect(client.conversations.items.list(conversation.id, { order: 'desc', limit }));
    t.deepEqual(desc.map((i) => i.id), [...ids].reverse(), `desc, limit ${limit}`);
  }
  const lastPage = await client.conversations.items.list(conversation.id, { order: 'asc', limit: 2, after: ids[5] });
  t.deepEqual(lastPage.data.map((i) => i.id), [ids[6]]);
  t.false(lastPage.has_more);
  t.false(lastPage.hasNextPage());

  const item = (await client.conversations.items.retrieve(ids[2]!, { conversation_id: conversation.id })) as OpenAI.Conversations.Message;
  t.like(item, { id: ids[2], type: 'message', role: 'user' });
  t.deepEqual(item.content, [{ type: 'input_text', text: 'item 2' }]);
  const after = await client.conversations.items.delete(ids[2]!, { conversation_id: conversation.id });
  t.like(after, { id: conversation.id, object: 'conversation' });
  const remaining = await collect(client.conversations.items.list(conversation.id, { order: 'asc', limit: 2 }));
  t.is(remaining.length, 6);
  t.deepEqual(
    remaining.map((i: any) => i.content[0].text),
    texts.filter((_, i) => i !== 2),
  );
  await t.throwsAsync(client.conversations.items.retrieve('msg_nope', { conversation_id: conversation.id }), { instanceOf: OpenAI.NotFoundError });
  const badLimit = await t.throwsAsync(client.conversations.items.list(conversation.id, { limit: 0 }), { instanceOf: OpenAI.BadRequestError });
  t.is(badLimit!.param, 'limit');
  const badOrder = await t.throwsAsync(client.conversations.items.list(conversation.id, { order: 'sideways' as any }), { instanceOf: OpenAI.BadRequestError });
  t.is(badOrder!.param, 'order');
});

test.serial('chat completions stored into a conversation read back through the items list', async (t) => {
  const client = await sdk();
  const conversation = await client.conversations.create({});
  for (const word of ['one', 'two', 'three']) {
    await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: word }], store: true, conversation: conversation.id } as any);
  }
  const asc = await collect(client.conversations.items.list(conversation.id, { order: 'asc', limit: 4 }));
  t.deepEqual(
    asc.map((i: any) => i.role),
    ['user', 'assistant', 'user', 'assistant', 'user', 'assistant'],
  );
  const desc = await collect(client.conversations.items.list(conversation.id, { order: 'desc', limit: 4 }));
  t.deepEqual(desc.map((i) => i.id), asc.map((i) => i.id).reverse());
});

test.serial('responses: create, stream, retrieve, input_items auto-pagination, delete; errors the SDK raises', async (t) => {
  const client = await sdk();
  const input: OpenAI.Responses.ResponseInput = Array.from({ length: 5 }, (_, i) => ({ type: 'message' as const, role: 'user' as const, content: `line ${i}` }));
  const response = await client.responses.create({ model: MODEL, input, tools: [] });
  t.is(response.object, 'response');
  t.is(response.status, 'completed');
  t.is(response.output_text, answer());
  t.truthy(response._request_id);
  t.is(typeof response.created_at, 'number');

  const all = await client.responses.inputItems.list(response.id, { order: 'asc' });
  t.is(all.data.length, 5);
  const ids = all.data.map((i) => i.id);
  t.is(new Set(ids).size, 5);
  t.false(all.has_more);
  t.like(await client.get(`/responses/${response.id}/input_items`, { query: { order: 'asc', limit: 2 } }), { object: 'list', first_id: ids[0], last_id: ids[1], has_more: true });
  for (const limit of [1, 2, 5, 10]) {
    t.deepEqual((await collect(client.responses.inputItems.list(response.id, { order: 'asc', limit }))).map((i) => i.id), ids, `asc, limit ${limit}`);
    t.deepEqual((await collect(client.responses.inputItems.list(response.id, { order: 'desc', limit }))).map((i) => i.id), [...ids].reverse(), `desc, limit ${limit}`);
  }
  const texts = (await collect(client.responses.inputItems.list(response.id, { order: 'asc', limit: 2 }))).map((i: any) => i.content[0].text);
  t.deepEqual(texts, ['line 0', 'line 1', 'line 2', 'line 3', 'line 4']);

  const stream = await client.responses.create({ model: MODEL, input: 'streamed', tools: [], stream: true });
  const types: string[] = [];
  let completed: OpenAI.Responses.Response | undefined;
  let sequence = -1;
  for await (const event of stream) {
    types.push(event.type);
    t.true(event.sequence_number > sequence, 'sequence numbers increase');
    sequence = event.sequence_number;
    if (event.type === 'response.completed') completed = event.response;
  }
  t.is(types[0], 'response.created');
  t.is(types.at(-1), 'response.completed');
  t.is((await client.responses.retrieve(completed!.id)).output_text, answer());

  // The SDK's stream helper accumulates the events into the response that is stored, tool calls included.
  fake.script('sweep-tool', [{ tool_calls: [{ name: 'file_search_query', arguments: { query: 'lighthouse' } }] }, { content: 'done' }]);
  for (const params of [
    { model: MODEL, input: 'helper', tools: [] },
    { model: MODEL, input: 'helper #script:sweep-tool' },
    { model: MODEL, input: 'weather?', tools: [{ type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false }] },
  ]) {
    const finalResponse = await client.responses.stream(params).finalResponse();
    const stored = await client.responses.retrieve(finalResponse.id);
    t.is(finalResponse.status, 'completed');
    t.deepEqual(withoutParsed(finalResponse.output), withoutParsed(stored.output), params.input);
    t.is(finalResponse.output_text, stored.output_text);
  }

  const retrieved = await client.responses.retrieve(response.id);
  t.like(retrieved, { id: response.id, object: 'response', status: 'completed' });
  t.is(retrieved.output_text, answer());
  await t.throwsAsync(client.responses.retrieve('resp_nope'), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(client.responses.inputItems.list('resp_nope'), { instanceOf: OpenAI.NotFoundError });
  const badLimit = await t.throwsAsync(client.responses.inputItems.list(response.id, { limit: 0 }), { instanceOf: OpenAI.BadRequestError });
  t.is(badLimit!.param, 'limit');
  const badTemp = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', temperature: 9 }), { instanceOf: OpenAI.BadRequestError });
  t.is(badTemp!.param, 'temperature');

  // Cancelling a finished foreground response is a 400 (as OpenAI answers) and leaves it as it is; deleting it works once.
  await t.throwsAsync(client.responses.cancel(response.id), { instanceOf: OpenAI.BadRequestError });
  t.is((await client.responses.retrieve(response.id)).status, 'completed');
  await client.responses.delete(response.id);
  await t.throwsAsync(client.responses.retrieve(response.id), { instanceOf: OpenAI.NotFoundError });
  await t.throwsAsync(client.responses.delete(response.id), { instanceOf: OpenAI.NotFoundError });
});

test.serial('responses: a background response is cancelled through the SDK and reads back cancelled', async (t) => {
  const client = await sdk();
  fake.script('sweep-hold', [{ hold: true }]);
  const queued = await client.responses.create({ model: MODEL, input: 'hold #script:sweep-hold', tools: [], background: true });
  t.true(['queued', 'in_progress'].includes(queued.status!), queued.status);
  const cancelled = await client.responses.cancel(queued.id);
  t.is(cancelled.object, 'response');
  t.is(cancelled.id, queued.id);
  t.is(cancelled.status, 'cancelled');
  t.is((await client.responses.retrieve(queued.id)).status, 'cancelled');
});

test.serial('AuthenticationError for a bad key; RateLimitError carries retry headers the SDK reads', async (t) => {
  const bad = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: `sk_${randomBase62(32)}`, maxRetries: 0 });
  const auth = await t.throwsAsync(bad.models.list(), { instanceOf: OpenAI.AuthenticationError });
  t.is(auth!.status, 401);
  t.truthy(auth!.requestID);

  const limited = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: await newKey({ requests_per_minute: 2 }), maxRetries: 0 });
  await limited.models.list();
  await limited.models.list();
  const refused = await t.throwsAsync(limited.models.list(), { instanceOf: OpenAI.RateLimitError });
  t.is(refused!.status, 429);
  t.truthy(refused!.requestID);
  const retryAfter = Number(refused!.headers?.get('retry-after'));
  t.true(Number.isFinite(retryAfter) && retryAfter > 0 && retryAfter <= 60, `retry-after ${refused!.headers?.get('retry-after')}`);
  t.not(refused!.headers?.get('x-should-retry'), 'false', 'a wait under a minute is left to the SDK to retry');

  // A spent budget: RateLimitError the SDK must not retry (the wait is hours).
  const user = await createTestUser(p.runtime.db.knex);
  const broke = (await keyClient(p, ADMIN_KEY).post('/admin/api-keys', { body: { user_id: user.id, name: 'broke', tier: 'pro', max_budget_micro_usd: 0 } })) as { key: string };
  const brokeClient = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: broke.key, maxRetries: 0 });
  for (const call of [
    () => brokeClient.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
    () => brokeClient.responses.create({ model: MODEL, input: 'x', tools: [] }),
  ]) {
    const spent = await t.throwsAsync(call(), { instanceOf: OpenAI.RateLimitError });
    t.like(spent!.error, { code: 'insufficient_quota' });
    t.is(spent!.headers?.get('x-should-retry'), 'false');
  }
  // A model outside the key's allow-list: PermissionDeniedError naming the model.
  const fenced = (await keyClient(p, ADMIN_KEY).post('/admin/api-keys', { body: { user_id: user.id, name: 'fenced', tier: 'pro', allowed_models: ['other-*'] } })) as { key: string };
  const fencedClient = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: fenced.key, maxRetries: 0 });
  for (const call of [
    () => fencedClient.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
    () => fencedClient.responses.create({ model: MODEL, input: 'x', tools: [] }),
  ]) {
    const denied = await t.throwsAsync(call(), { instanceOf: OpenAI.PermissionDeniedError });
    t.is(denied!.param, 'model');
  }
});

test.serial("another user's conversations, items and responses are NotFoundError for every SDK method", async (t) => {
  const owner = await sdk();
  const other = await sdk();
  const conversation = await owner.conversations.create({ items: [{ type: 'message', role: 'user', content: 'mine' }] });
  const [item] = (await owner.conversations.items.list(conversation.id)).data;
  const response = await owner.responses.create({ model: MODEL, input: 'mine', tools: [] });
  for (const [name, call] of [
    ['conversations.retrieve', () => other.conversations.retrieve(conversation.id)],
    ['conversations.update', () => other.conversations.update(conversation.id, { metadata: { x: 'y' } })],
    ['conversations.delete', () => other.conversations.delete(conversation.id)],
    ['items.list', () => other.conversations.items.list(conversation.id)],
    ['items.create', () => other.conversations.items.create(conversation.id, { items: [{ type: 'message', role: 'user', content: 'x' }] })],
    ['items.retrieve', () => other.conversations.items.retrieve(item!.id!, { conversation_id: conversation.id })],
    ['items.delete', () => other.conversations.items.delete(item!.id!, { conversation_id: conversation.id })],
    ['responses.retrieve', () => other.responses.retrieve(response.id)],
    ['responses.cancel', () => other.responses.cancel(response.id)],
    ['responses.delete', () => other.responses.delete(response.id)],
    ['inputItems.list', () => other.responses.inputItems.list(response.id)],
    ['responses.create in the conversation', () => other.responses.create({ model: MODEL, input: 'x', tools: [], conversation: conversation.id })],
  ] as const) {
    await t.throwsAsync((call as () => Promise<unknown>)(), { instanceOf: OpenAI.NotFoundError }, name);
  }
  const chained = await t.throwsAsync(other.responses.create({ model: MODEL, input: 'x', tools: [], previous_response_id: response.id }), { instanceOf: OpenAI.BadRequestError });
  t.is(chained!.param, 'previous_response_id');
  // Everything is still the owner's, unchanged.
  t.like(await owner.conversations.retrieve(conversation.id), { metadata: {} });
  t.is((await collect(owner.conversations.items.list(conversation.id))).length, 1);
  t.is((await owner.responses.retrieve(response.id)).status, 'completed');
});

test.serial('auto-pagination with the default page size: 45 conversation items and 45 input items, both orders', async (t) => {
  const client = await sdk();
  const message = (text: string) => ({ type: 'message' as const, role: 'user' as const, content: text });
  const texts = Array.from({ length: 45 }, (_, i) => `n${i}`);
  const conversation = await client.conversations.create({ items: texts.slice(0, 20).map(message) });
  await client.conversations.items.create(conversation.id, { items: texts.slice(20, 40).map(message) });
  await client.conversations.items.create(conversation.id, { items: texts.slice(40).map(message) });
  const textOf = (item: any) => item.content[0].text as string;
  t.deepEqual((await collect(client.conversations.items.list(conversation.id, { order: 'asc' }))).map(textOf), texts);
  t.deepEqual((await collect(client.conversations.items.list(conversation.id))).map(textOf), [...texts].reverse(), 'desc by default');
  const response = await client.responses.create({ model: MODEL, input: texts.map(message), tools: [] });
  t.deepEqual((await collect(client.responses.inputItems.list(response.id, { order: 'asc' }))).map(textOf), texts);
  t.deepEqual((await collect(client.responses.inputItems.list(response.id))).map(textOf), [...texts].reverse(), 'desc by default');
});

test.serial('planned endpoints the SDK has methods for are 501 the SDK does not retry; unknown ones are NotFoundError', async (t) => {
  const client = await sdk();
  for (const call of [
    () => client.embeddings.create({ model: MODEL, input: 'x' }),
    () => client.images.generate({ prompt: 'x' }),
    () => client.audio.speech.create({ model: MODEL, input: 'x', voice: 'alloy' }),
    () => client.audio.transcriptions.create({ model: MODEL, file: new File([Buffer.from('abc')], 'a.wav') }),
  ]) {
    const planned = await t.throwsAsync(call() as Promise<unknown>, { instanceOf: OpenAI.InternalServerError });
    t.is(planned!.status, 501);
    t.is(planned!.headers?.get('x-should-retry'), 'false');
  }
  await t.throwsAsync(client.moderations.create({ input: 'x' }), { instanceOf: OpenAI.NotFoundError });
});

test.serial('the SDK pointed at the /llm/v1 base reaches every family, the Responses API included', async (t) => {
  const client = await sdk();
  // `{base_url}/v1/...` and `{base_url}/llm/v1/...` are the same endpoints, for every service.
  const llm = new OpenAI({ baseURL: `${p.url}/llm/v1`, apiKey: client.apiKey, maxRetries: 0 });
  t.true((await collect(llm.models.list())).some((m) => m.id === MODEL));
  t.is((await llm.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] })).choices[0]!.message.content, answer());
  const conversation = await llm.conversations.create({ items: [{ type: 'message', role: 'user', content: 'a' }] });
  t.is((await collect(llm.conversations.items.list(conversation.id))).length, 1);

  const response = await llm.responses.create({ model: MODEL, input: 'via llm', tools: [] });
  t.is(response.output_text, answer());
  t.is((await llm.responses.retrieve(response.id)).id, response.id);
  t.deepEqual((await collect(llm.responses.inputItems.list(response.id))).map((i: any) => i.content[0].text), ['via llm']);
  const stream = await llm.responses.create({ model: MODEL, input: 'streamed via llm', tools: [], stream: true });
  let text = '';
  for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
  t.is(text, answer());
  await t.throwsAsync(llm.responses.cancel(response.id), { instanceOf: OpenAI.BadRequestError });
  await llm.responses.delete(response.id);
  await t.throwsAsync(client.responses.retrieve(response.id), { instanceOf: OpenAI.NotFoundError });
  // Unauthenticated, the prefixed route is refused like the plain one.
  const anonymous = await fetch(`${p.url}/llm/v1/responses/${response.id}`);
  t.is(anonymous.status, 401);
});
