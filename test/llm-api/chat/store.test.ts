import test from 'ava';
import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { createTestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';

// store: true wired to the conversations domain (issue #6): items, message.sent, history, project instruction.
let h: LlmHarness;
let fake: FakeUpstream;
let client: OpenAI;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'store', models: [{ id: 'store-model' }, { id: 'tiny-model' }, { id: 'paged-model' }] });
  h = await startLlmHarness();
  const provider = (await h.call('POST', '/v1/admin/providers', { name: 'Store', vendor: 'fake', base_url: fake.url })).body.id;
  const pms = (await h.call('GET', `/v1/admin/models/provider-models?provider_id=${provider}`)).body.data;
  const tiny = pms.find((m: any) => m.model_public_id === 'tiny-model');
  await h.call('PATCH', `/v1/admin/models/provider-models/${tiny.id}`, { token_limits: { context_length: 40 } });
  const paged = pms.find((m: any) => m.model_public_id === 'paged-model');
  // 70 stored turns of 13 estimated tokens each, plus the 7 of the request's own message.
  await h.call('PATCH', `/v1/admin/models/provider-models/${paged.id}`, { token_limits: { context_length: 7 + 70 * 13 } });
  client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'x', maxRetries: 0, defaultHeaders: h.headers(h.user) });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const items = async (conversationId: string) => (await h.call('GET', `/v1/conversations/${conversationId}/items?order=asc&limit=100`, undefined, h.user)).body.data;
/** A stream the client abandons is stored once the server notices: wait (bounded) until `count` items are there. */
const itemsOnce = (conversationId: string, count: number): Promise<any[]> =>
  waitFor(async () => {
    const found: any[] = await items(conversationId);
    return found.length >= count && found;
  }, 30_000, `${count} items stored in ${conversationId}`);
const sentBody = (marker: string) => [...fake.requests].reverse().find((r) => JSON.stringify(r.body ?? {}).includes(marker))?.body;

test.serial('store: true without a conversation creates one, stores the input and the answer, emits message.sent twice', async (t) => {
  const res: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'first question' }], store: true });
  t.regex(res.conversation.id, /^conv_/);
  t.is(res.conversation.title, 'first question');
  const stored = await items(res.conversation.id);
  t.deepEqual(stored.map((i: any) => [i.role, i.status]), [['user', 'completed'], ['assistant', 'completed']]);
  t.is(stored[1].content[0].text, 'Hello from store w1 w2 w3 w4');
  const events = await h.service.runtime.db.knex('outbox_events').where({ type: 'message.sent' }).whereRaw("data->>'conversation_id' = ?", [res.conversation.id]);
  t.is(events.length, 2);
  const assistant = events.find((e: any) => e.data.role === 'assistant');
  t.is(assistant.data.model, 'store-model');
  t.deepEqual(assistant.data.tokens_used, { prompt: res.usage.prompt_tokens, completion: res.usage.completion_tokens });
});

test.serial('history is prepended, the project instruction becomes the system message; store false leaves it read-only', async (t) => {
  const project = await h.call('POST', '/v1/projects', { name: 'P', instruction: 'You are terse.' }, h.user);
  t.true(project.status >= 200 && project.status < 300);
  const conv = await h.call('POST', '/v1/conversations', { project_id: project.body.id, items: [{ type: 'message', role: 'user', content: 'earlier question' }, { type: 'message', role: 'assistant', content: 'earlier answer' }] }, h.user);
  const id = conv.body.id;
  const res: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'hist-1' }], store: true, conversation: id } as any);
  t.is(res.conversation.id, id);
  t.deepEqual(
    sentBody('hist-1').messages.map((m: any) => [m.role, m.content]),
    [['system', 'You are terse.'], ['user', 'earlier question'], ['assistant', 'earlier answer'], ['user', 'hist-1']],
  );
  t.false('conversation' in sentBody('hist-1'));
  t.is((await items(id)).length, 4);

  await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'hist-2' }], conversation: { id } } as any);
  t.is(sentBody('hist-2').messages.length, 6);
  t.is((await items(id)).length, 4);

  const other = await h.call('POST', '/v1/chat/completions', { model: 'store-model', messages: [{ role: 'user', content: 'x' }], store: true, conversation: 'conv_doesnotexist000000000000' }, h.user);
  t.is(other.status, 404);
  t.like(other.body.error, { type: 'not_found_error', param: 'conversation' });
});

test.serial('history is trimmed to the context length, keeping system and latest turns', async (t) => {
  const conv = await h.call('POST', '/v1/conversations', { items: Array.from({ length: 10 }, (_, i) => ({ type: 'message', role: i % 2 ? 'assistant' : 'user', content: `turn ${i} ${'x'.repeat(40)}` })) }, h.user);
  await client.chat.completions.create({ model: 'tiny-model', messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: 'trim-1' }], conversation: conv.body.id } as any);
  const sent = sentBody('trim-1').messages;
  t.true(sent.length < 12);
  t.is(sent.at(-1).content, 'trim-1');
  t.true(sent.some((m: any) => m.content === 'sys'));
  t.true(sent.slice(0, -2).every((m: any) => /turn [5-9]/.test(m.content)));
});

test.serial('a conversation longer than the context sends exactly the newest turns that fit, read across pages', async (t) => {
  const conv = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  // 150 turns of 36 characters (ceil(36 / 4) + 4 = 13 tokens each): 70 fit, which spans the
  // history's first pages (32, then 64 items), and 80 older ones must not be sent.
  const turn = (i: number) => `turn ${String(i).padStart(3, '0')} ${'x'.repeat(27)}`;
  for (let i = 0; i < 150; i += 20) {
    const r = await h.call('POST', `/v1/conversations/${conv}/items`, { items: Array.from({ length: Math.min(20, 150 - i) }, (_, k) => ({ type: 'message', role: (i + k) % 2 ? 'assistant' : 'user', content: turn(i + k) })) }, h.user);
    t.is(r.status, 200);
  }
  await client.chat.completions.create({ model: 'paged-model', messages: [{ role: 'user', content: 'trim-long' }], conversation: conv } as any);
  const sent = sentBody('trim-long').messages.map((m: any) => m.content);
  t.deepEqual(sent, [...Array.from({ length: 70 }, (_, k) => turn(80 + k)), 'trim-long']);
});

test.serial('stream with store: the conversation rides on a chunk with choices; a disconnect leaves an incomplete answer', async (t) => {
  const conv = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  const stream = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'streamed' }], stream: true, store: true, conversation: conv } as any);
  const chunks: any[] = [];
  for await (const chunk of stream as any) chunks.push(chunk);
  const withConversation = chunks.filter((c) => c.conversation);
  t.is(withConversation.length, 1);
  t.deepEqual(withConversation[0].conversation, { id: conv, title: null });
  t.true(Array.isArray(withConversation[0].choices));
  const stored = await items(conv); // stored before [DONE]
  t.is(stored[1].content[0].text, 'Hello from store w1 w2 w3 w4');

  const conv2 = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  const controller = new AbortController();
  const held = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'hold #hold' }], stream: true, store: true, conversation: conv2 } as any, { signal: controller.signal });
  try {
    for await (const chunk of held as any) if (chunk.choices[0]?.delta?.content === 'held') controller.abort();
  } catch {
    // aborted
  }
  const partial = await itemsOnce(conv2, 2);
  t.is(partial[1].status, 'incomplete');
  t.is(partial[1].content[0].text, 'held');
});

test.serial('store_reasoning keeps the reasoning; with n > 1 the first choice is stored', async (t) => {
  const plain: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'why #reason' }], store: true, store_reasoning: true, n: 2 } as any);
  const stored = await items(plain.conversation.id);
  t.deepEqual(stored.map((i: any) => i.type), ['message', 'reasoning', 'message']);
  t.is(stored[1].summary[0].text, 'thinking 0');
  t.is(stored[2].content[0].text, 'Hello from store w1 w2 w3 w4 #0');

  const without: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'why #reason' }], store: true } as any);
  t.deepEqual((await items(without.conversation.id)).map((i: any) => i.type), ['message', 'message']);

  const conv = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  const stream = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'why #reason' }], stream: true, store: true, store_reasoning: true, conversation: conv } as any);
  for await (const _ of stream as any) void _;
  const streamed = await items(conv);
  t.deepEqual(streamed.map((i: any) => i.type), ['message', 'reasoning', 'message']);
  t.is(streamed[1].summary[0].text, 'thinking hard');
});

const tools = [
  { type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } },
  { type: 'function' as const, function: { name: 'fetch_page', parameters: { type: 'object' } } },
];
const shape = (item: any) =>
  item.type === 'message'
    ? [item.type, item.role, item.content[0].text]
    : item.type === 'function_call'
      ? [item.type, item.call_id, item.name, item.arguments]
      : item.type === 'custom_tool_call'
        ? [item.type, item.call_id, item.name, item.input]
        : [item.type, item.call_id, item.output];

test.serial('tool calls are stored as function_call items, tool results as function_call_output; later turns replay a valid sequence', async (t) => {
  const first: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'tools-json-1' }], tools: tools.slice(0, 1), store: true } as any);
  const conv = first.conversation.id;
  const call = first.choices[0].message.tool_calls[0];
  t.deepEqual((await items(conv)).map(shape), [
    ['message', 'user', 'tools-json-1'],
    ['function_call', call.id, 'lookup', call.function.arguments],
  ]);

  // The client answers the call; the conversation supplies the call itself.
  await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'tool', tool_call_id: call.id, content: '{"result":42}' }], store: true, conversation: conv } as any);
  const second = fake.requests.at(-1)!.body.messages;
  t.deepEqual(second, [
    { role: 'user', content: 'tools-json-1' },
    { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: 'lookup', arguments: call.function.arguments } }] },
    { role: 'tool', tool_call_id: call.id, content: '{"result":42}' },
  ]);
  t.deepEqual((await items(conv)).slice(2).map(shape), [
    ['function_call_output', call.id, '{"result":42}'],
    ['message', 'assistant', 'Hello from store w1 w2 w3 w4'],
  ]);

  await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'tools-json-2' }], store: true, conversation: conv } as any);
  t.deepEqual(sentBody('tools-json-2').messages.map((m: any) => [m.role, m.tool_call_id ?? m.tool_calls?.[0]?.id ?? m.content]), [
    ['user', 'tools-json-1'],
    ['assistant', call.id],
    ['tool', call.id],
    ['assistant', 'Hello from store w1 w2 w3 w4'],
    ['user', 'tools-json-2'],
  ]);
});

test.serial("an input assistant message with a custom tool's call is stored as a custom_tool_call item after its text", async (t) => {
  const res: any = await client.chat.completions.create({
    model: 'store-model',
    messages: [
      { role: 'user', content: 'custom-store' },
      { role: 'assistant', content: 'Searching first.', tool_calls: [{ id: 'call_c9', type: 'custom', custom: { name: 'grep', input: 'TODO' } }] },
    ],
    store: true,
  } as any);
  t.regex(res.conversation.id, /^conv_/);
  t.deepEqual((await items(res.conversation.id)).map(shape), [
    ['message', 'assistant', 'Searching first.'],
    ['custom_tool_call', 'call_c9', 'grep', 'TODO'],
    ['message', 'assistant', 'Hello from store w1 w2 w3 w4'],
  ]);
});

for (const stream of [false, true]) {
  test.serial(`${stream ? 'streamed' : 'JSON'}: a custom tool's call in the answer is stored as a custom_tool_call item, its result as a custom_tool_call_output; the next turns replay them`, async (t) => {
    const name = `custom-${stream ? 'stream' : 'json'}`;
    fake.script(name, [{ tool_calls: [{ name: 'apply_patch', arguments: '*** Begin Patch\n+x\n*** End Patch', custom: true }] }, { content: 'Patched.' }]);
    const tool = { type: 'custom', custom: { name: 'apply_patch', description: 'Applies a patch' } };
    const ask = async (body: Record<string, unknown>) => {
      if (!stream) return (await h.call('POST', '/v1/chat/completions', { model: 'store-model', store: true, tools: [tool], ...body }, h.user)).body;
      const chunks: any[] = [];
      for await (const chunk of (await client.chat.completions.create({ model: 'store-model', store: true, stream: true, tools: [tool], ...body } as any)) as any) chunks.push(chunk);
      return { conversation: chunks.find((c) => c.conversation)?.conversation };
    };
    const first = await ask({ messages: [{ role: 'user', content: `#script:${name}` }] });
    const conv = first.conversation.id as string;
    const callId = `call_${name}_0_0`;
    t.deepEqual((await items(conv)).map(shape), [
      ['message', 'user', `#script:${name}`],
      ['custom_tool_call', callId, 'apply_patch', '*** Begin Patch\n+x\n*** End Patch'],
    ]);

    // The client sends the result only: the conversation supplies the call, replayed as a custom tool's call.
    await ask({ messages: [{ role: 'tool', tool_call_id: callId, content: 'applied' }], conversation: conv });
    t.deepEqual(fake.scriptRequests(name).at(-1)!.body.messages, [
      { role: 'user', content: `#script:${name}` },
      { role: 'assistant', content: null, tool_calls: [{ id: callId, type: 'custom', custom: { name: 'apply_patch', input: '*** Begin Patch\n+x\n*** End Patch' } }] },
      { role: 'tool', tool_call_id: callId, content: 'applied' },
    ]);
    const stored = await items(conv);
    t.deepEqual(stored.slice(2).map(shape), [
      ['custom_tool_call_output', callId, 'applied'],
      ['message', 'assistant', 'Patched.'],
    ]);
    t.like(stored[1], { type: 'custom_tool_call', call_id: callId, name: 'apply_patch', status: 'completed' });
    t.false('arguments' in stored[1]);
  });
}

test.serial('an answer that only calls tools reports its usage on no message.sent, not on an assistant prefill of the input', async (t) => {
  const first: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'prefill-tools' }], store: true } as any);
  const conv = first.conversation.id;
  const res: any = await client.chat.completions.create({
    model: 'store-model',
    messages: [{ role: 'user', content: 'prefill-tools' }, { role: 'assistant', content: 'Let me look that up.' }],
    tools: tools.slice(0, 1),
    store: true,
    conversation: conv,
  } as any);
  t.truthy(res.choices[0].message.tool_calls?.length);
  t.true(res.usage.completion_tokens > 0);
  const stored = await items(conv);
  t.deepEqual(stored.slice(2).map((i: any) => [i.type, i.role ?? null]), [
    ['message', 'assistant'],
    ['function_call', null],
  ]);
  const events = await h.service.runtime.db.knex('outbox_events').where({ type: 'message.sent' }).whereRaw("data->>'conversation_id' = ?", [conv]).orderBy('seq', 'asc');
  t.deepEqual(events.map((e: any) => [e.data.message_id, e.data.role, e.data.tokens_used]), [
    [stored[0].id, 'user', null],
    [stored[1].id, 'assistant', { prompt: first.usage.prompt_tokens, completion: first.usage.completion_tokens }],
    [stored[2].id, 'assistant', null],
  ]);
});

test.serial('a streamed exchange is stored before [DONE]: parallel tool calls assembled from their deltas, results of each call kept', async (t) => {
  const stream = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'tools-stream-1' }], tools, stream: true, store: true } as any);
  let conv = '';
  for await (const chunk of stream as any) if (chunk.conversation) conv = chunk.conversation.id;
  // Read as soon as the client has its [DONE]: no waiting.
  t.deepEqual((await items(conv)).map(shape), [
    ['message', 'user', 'tools-stream-1'],
    ['function_call', 'call_0_0', 'lookup', '{"q":"x","i":0}'],
    ['function_call', 'call_0_1', 'fetch_page', '{"q":"x","i":1}'],
  ]);

  const results = [{ role: 'tool', tool_call_id: 'call_0_0', content: 'r0' }, { role: 'tool', tool_call_id: 'call_0_1', content: 'r1' }];
  const next = await client.chat.completions.create({ model: 'store-model', messages: results, stream: true, store: true, conversation: conv } as any);
  for await (const _ of next as any) void _;
  t.deepEqual(fake.requests.at(-1)!.body.messages.map((m: any) => [m.role, m.tool_call_id ?? m.tool_calls?.map((c: any) => c.id).join() ?? m.content]), [
    ['user', 'tools-stream-1'],
    ['assistant', 'call_0_0,call_0_1'],
    ['tool', 'call_0_0'],
    ['tool', 'call_0_1'],
  ]);
  // The next turn, sent the moment the stream ended, has the answer in its history.
  await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: 'tools-stream-2' }], conversation: conv } as any);
  t.deepEqual(sentBody('tools-stream-2').messages.slice(2).map((m: any) => [m.role, m.tool_call_id ?? m.content]), [
    ['tool', 'call_0_0'],
    ['tool', 'call_0_1'],
    ['assistant', 'Hello from store w1 w2 w3 w4'],
    ['user', 'tools-stream-2'],
  ]);
});

test.serial('a request refused or failed before an answer creates no conversation and stores nothing', async (t) => {
  const knex = h.service.runtime.db.knex;
  const other = await createTestUser(knex);
  const otherClient = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'x', maxRetries: 0, defaultHeaders: h.headers(other) });
  const createdFor = async (userId: string) => (await knex('outbox_events').where({ type: 'conversation.created' }).whereRaw("data->>'user_id' = ?", [userId])).length;
  const conversationsOf = async (userId: string) => (await knex('conversations').where({ user_id: userId })).length;

  // Refused by the model allow-list (403), before the provider is called.
  t.is((await h.call('PATCH', `/v1/admin/users/${other.id}`, { allowed_models: ['tiny-model'] })).status, 200);
  const refused = await h.call('POST', '/v1/chat/completions', { model: 'store-model', messages: [{ role: 'user', content: 'refused' }], store: true }, other);
  t.is(refused.status, 403);
  // The provider refuses (400), fails (500), or a stream breaks before any answer arrived.
  const rejected = await h.call('POST', '/v1/chat/completions', { model: 'tiny-model', messages: [{ role: 'user', content: 'bad #fail:400' }], store: true }, other);
  t.is(rejected.status, 400);
  await t.throwsAsync(otherClient.chat.completions.create({ model: 'tiny-model', messages: [{ role: 'user', content: 'down #fail:500' }], store: true } as any));
  const broken = await otherClient.chat.completions.create({ model: 'tiny-model', messages: [{ role: 'user', content: 'broken #midstream:0' }], stream: true, store: true } as any);
  let announced = '';
  await t.throwsAsync(async () => {
    for await (const chunk of broken as any) if (chunk.conversation) announced = chunk.conversation.id;
  });
  t.regex(announced, /^conv_/);
  t.is(await conversationsOf(other.id), 0);
  t.is(await createdFor(other.id), 0);
  t.is((await h.call('GET', `/v1/conversations/${announced}`, undefined, other)).status, 404);

  // An existing conversation receives nothing from a failed exchange.
  const conv = (await h.call('POST', '/v1/conversations', {}, other)).body.id;
  await t.throwsAsync(otherClient.chat.completions.create({ model: 'tiny-model', messages: [{ role: 'user', content: 'down #fail:500' }], store: true, conversation: conv } as any));
  t.is((await h.call('GET', `/v1/conversations/${conv}/items`, undefined, other)).body.data.length, 0);
});

test.serial("the title of a conversation store: true creates is cut after 80 characters, never inside one", async (t) => {
  const text = `${'a'.repeat(79)}😀 and more`;
  const res: any = await client.chat.completions.create({ model: 'store-model', messages: [{ role: 'user', content: text }], store: true });
  const expected = `${'a'.repeat(79)}😀`;
  t.is(res.conversation.title, expected);
  t.is((await h.call('GET', `/v1/conversations/${res.conversation.id}`, undefined, h.user)).body.title, expected);
});
