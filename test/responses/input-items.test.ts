import test from 'ava';
import { MODEL, REASONING_MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// The request's input items and tools as the service takes them, through the edge with the openai
// SDK: what is refused up front (naming the input field), what a conversation receives (everything
// an accepted input holds, in the shape llm-api's item store takes), how a conversation's stored
// items are replayed to the model (every part shape llm-api accepts, never validated as a request),
// `tool_choice: "none"` with named tools, a truncated history's tool outputs, and `input_items` paging.
let p: ResponsesPlatform;
/** The model whose context window the truncation test shrinks (the other tests use MODEL, unbounded). */
const SMALL_CONTEXT_MODEL = REASONING_MODEL;

test.before(async () => {
  p = await startResponsesPlatform({ TEST_LOG_LEVEL: 'silent' });
  p.fake.script('plain', [{ content: 'ok' }]);
  const providerModels = await p.api(p.adminKey, 'GET', '/v1/admin/models/provider-models');
  const pm = providerModels.json.data.find((m: any) => m.model_public_id === SMALL_CONTEXT_MODEL);
  const patched = await p.api(p.adminKey, 'PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { context_length: 600 } });
  if (patched.status !== 200) throw new Error(`patch: ${patched.status}`);
});
test.after.always(async () => {
  await p?.stop();
});

/** The body the provider was last sent for a request whose messages hold `marker`. */
const sentFor = (marker: string): any => [...p.fake.requests].reverse().find((r) => JSON.stringify(r.body?.messages ?? []).includes(marker))?.body;

async function conversationItems(client: any, id: string): Promise<any[]> {
  const items: any[] = [];
  for await (const item of client.conversations.items.list(id, { order: 'asc' })) items.push(item);
  return items;
}

test('a function tool with null optional fields reaches the model without them', async (t) => {
  const { client } = await p.newClient();
  const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
  const response = await client.responses.create({
    model: MODEL,
    input: 'null-description #notools',
    tools: [{ type: 'function', name: 'get_weather', description: null, parameters, strict: true }],
  });
  t.is(response.status, 'completed');
  t.deepEqual(sentFor('null-description').tools, [{ type: 'function', function: { name: 'get_weather', parameters, strict: true } }]);
});

test('input a conversation could not store is a 400 naming the field, and nothing is written', async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const empty: any = await t.throwsAsync(
    client.responses.create({ model: MODEL, tools: [], conversation: conversation.id, input: [{ role: 'user', content: [] as any }, { role: 'user', content: 'hello #script:plain' }] }),
  );
  t.is(empty.status, 400);
  t.is(empty.param, 'input[0].content');
  const unnamed: any = await t.throwsAsync(
    client.responses.create({ model: MODEL, tools: [], input: [{ type: 'function_call', call_id: 'c1', name: '', arguments: '{}' } as any, { role: 'user', content: 'x #script:plain' }] }),
  );
  t.is(unnamed.param, 'input[0].name');
  const status: any = await t.throwsAsync(
    client.responses.create({ model: MODEL, tools: [], input: [{ type: 'mcp_call', name: 'python_exec', arguments: '{}', status: '' } as any, { role: 'user', content: 'x #script:plain' }] }),
  );
  t.is(status.param, 'input[0].status');
  t.deepEqual(await conversationItems(client, conversation.id), []);
});

test('every item of an accepted input is written to the conversation, in the shape its store takes', async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const response = await client.responses.create({
    model: MODEL,
    tools: [],
    conversation: conversation.id,
    input: [
      { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'thought' }], content: [{ type: 'reasoning_text', text: 'long thought' }] },
      { type: 'mcp_list_tools', id: 'mcpl_1', server_label: 'jan', tools: [{ name: 'python_exec', input_schema: { type: 'object' }, description: null, annotations: null }] },
      { type: 'mcp_call', id: 'mcp_1', server_label: 'jan', name: 'python_exec', arguments: '{}', output: null, error: 'boom', status: 'failed' } as any,
      { type: 'message', id: 'msg_a1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'earlier', annotations: [], logprobs: [{ token: 'e' }] } as any] },
      { role: 'user', content: [{ type: 'input_text', text: 'storable #script:plain', annotations: 'none' } as any] },
    ],
  });
  t.is(response.status, 'completed');
  const items = await conversationItems(client, conversation.id);
  t.deepEqual(
    items.map((i) => [i.type, i.role ?? null]),
    [
      ['reasoning', null],
      ['mcp_list_tools', null],
      ['mcp_call', null],
      ['message', 'assistant'],
      ['message', 'user'],
      ['message', 'assistant'],
    ],
  );
  t.like(items[1].tools[0], { name: 'python_exec', input_schema: { type: 'object' } });
  t.like(items[2], { name: 'python_exec', error: 'boom', status: 'failed' });
  t.is(items[3].content[0].text, 'earlier');
  t.is(items[4].content[0].text, 'storable #script:plain');
  t.is(items[5].content[0].text, 'ok');
});

test("a conversation's stored parts of every shape llm-api accepts are replayed to the model", async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({
    items: [
      { type: 'message', role: 'user', content: [{ type: 'image', image: { url: 'https://example.com/x.png', detail: 'low' } }, { type: 'input_text', text: 'what is this' }] } as any,
      { type: 'message', role: 'assistant', content: 'a cat' },
      { type: 'message', role: 'user', content: [{ type: 'output_text', output_text: { text: 'nested text' } }] } as any,
      { type: 'message', role: 'user', content: [{ type: 'input_file', file: { file_id: 'file_1' } }] } as any,
      { type: 'message', role: 'tool', content: 'a tool message without a call' } as any,
    ],
  });
  const response = await client.responses.create({ model: MODEL, input: 'spec-history #script:plain', conversation: conversation.id, tools: [] });
  t.is(response.status, 'completed');
  t.deepEqual(sentFor('spec-history').messages, [
    { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/x.png', detail: 'low' } }, { type: 'text', text: 'what is this' }] },
    { role: 'assistant', content: 'a cat' },
    { role: 'user', content: 'nested text' },
    { role: 'user', content: 'spec-history #script:plain' },
  ]);
});

test('duplicate or unusable input item ids are a 400 naming input[i].id; unique ids page to the end', async (t) => {
  const { client } = await p.newClient();
  const duplicate: any = await t.throwsAsync(
    client.responses.create({ model: MODEL, tools: [], input: [{ id: 'dup', role: 'user', content: 'a' } as any, { id: 'dup', role: 'user', content: 'b #script:plain' } as any] }),
  );
  t.is(duplicate.status, 400);
  t.is(duplicate.param, 'input[1].id');
  const long: any = await t.throwsAsync(client.responses.create({ model: MODEL, tools: [], input: [{ id: 'x'.repeat(129), role: 'user', content: 'a #script:plain' } as any] }));
  t.is(long.param, 'input[0].id');

  const response = await client.responses.create({
    model: MODEL,
    tools: [],
    input: [
      { id: 'x'.repeat(128), role: 'user', content: 'a' } as any,
      { type: 'function_call', id: 'fc_1', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'function_call_output', id: null, call_id: 'c1', output: 'r' } as any,
      { role: 'user', content: 'unique ids #script:plain' },
    ],
  });
  const seen: string[] = [];
  for await (const item of client.responses.inputItems.list(response.id, { limit: 1, order: 'asc' })) {
    seen.push(item.id!);
    if (seen.length > 4) break;
  }
  t.is(seen.length, 4);
  t.deepEqual(seen.slice(0, 2), ['x'.repeat(128), 'fc_1']);
  t.is(new Set(seen).size, 4);
});

test('function_call arguments that are not a JSON string are a 400 naming them', async (t) => {
  const { client } = await p.newClient();
  const error: any = await t.throwsAsync(
    client.responses.create({
      model: MODEL,
      tools: [],
      input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: { a: 1 } } as any, { type: 'function_call_output', call_id: 'c1', output: 'r' }, { role: 'user', content: 'args #script:plain' }],
    }),
  );
  t.is(error.status, 400);
  t.is(error.param, 'input[0].arguments');
});

test('tool_choice none accepts the tools it names (still checked); the model is not offered them', async (t) => {
  const { client } = await p.newClient();
  const named = await client.responses.create({ model: MODEL, input: 'choice-none-named', tools: ['python_exec' as any], tool_choice: 'none' });
  t.is(named.status, 'completed');
  t.deepEqual(named.output.map((item) => item.type), ['message']);
  const mcp = await client.responses.create({ model: MODEL, input: 'choice-none-mcp', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] } as any], tool_choice: 'none' });
  t.is(mcp.status, 'completed');
  for (const marker of ['choice-none-named', 'choice-none-mcp']) {
    const sent = sentFor(marker);
    t.true(sent.tool_choice === 'none' || sent.tools === undefined, `${marker}: no tool may be called`);
  }
  const unknown: any = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', tools: ['no_such_tool' as any], tool_choice: 'none' }));
  t.is(unknown.status, 400);
  t.is(unknown.param, 'tools[0]');
});

test('truncation auto never sends a tool output whose call was cut, even between two calls of one turn', async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({
    items: [
      { type: 'message', role: 'user', content: 'look up two things' },
      // ~1 000 estimated tokens: this call does not fit the 600-token window; the items after it do.
      { type: 'function_call', call_id: 'call_big', name: 'lookup', arguments: JSON.stringify({ q: 'y'.repeat(4000) }) } as any,
      { type: 'function_call', call_id: 'call_small', name: 'lookup', arguments: '{"q":"s"}' } as any,
      { type: 'function_call_output', call_id: 'call_big', output: 'big found' } as any,
      { type: 'function_call_output', call_id: 'call_small', output: 'small found' } as any,
      { type: 'message', role: 'assistant', content: 'both found' },
    ],
  });
  const response = await client.responses.create({ model: SMALL_CONTEXT_MODEL, input: 'orphan-mid', conversation: conversation.id, truncation: 'auto', tools: [], store: false });
  t.is(response.status, 'completed');
  t.deepEqual(
    sentFor('orphan-mid').messages.map((m: any) => [m.role, m.tool_call_id ?? m.tool_calls?.map((c: any) => c.id) ?? m.content]),
    [
      ['assistant', ['call_small']],
      ['tool', 'call_small'],
      ['assistant', 'both found'],
      ['user', 'orphan-mid'],
    ],
  );
});

test('input_items pages before a cursor: the items just before it, in either order', async (t) => {
  const { client, key } = await p.newClient();
  const input = Array.from({ length: 10 }, (_, i) => ({ id: `i${i + 1}`, role: 'user' as const, content: `i${i + 1}${i === 9 ? ' #script:plain' : ''}` }));
  const response = await client.responses.create({ model: MODEL, input: input as any, tools: [] });
  const page = async (query: string) => {
    const res = await p.api(key, 'GET', `/v1/responses/${response.id}/input_items?${query}`);
    t.is(res.status, 200, query);
    return { ids: res.json.data.map((item: any) => item.id), has_more: res.json.has_more, first_id: res.json.first_id, last_id: res.json.last_id };
  };
  t.deepEqual(await page('order=asc&limit=2&before=i5'), { ids: ['i3', 'i4'], has_more: true, first_id: 'i3', last_id: 'i4' });
  t.deepEqual(await page('order=asc&limit=2&before=i3'), { ids: ['i1', 'i2'], has_more: false, first_id: 'i1', last_id: 'i2' });
  t.deepEqual(await page('order=asc&limit=5&before=i2'), { ids: ['i1'], has_more: false, first_id: 'i1', last_id: 'i1' });
  t.deepEqual(await page('order=desc&limit=2&before=i5'), { ids: ['i7', 'i6'], has_more: true, first_id: 'i7', last_id: 'i6' });
  t.deepEqual(await page('order=asc&limit=5&after=i2&before=i5'), { ids: ['i3', 'i4'], has_more: false, first_id: 'i3', last_id: 'i4' });
  t.deepEqual(await page('order=asc&limit=1&after=i2&before=i5'), { ids: ['i3'], has_more: true, first_id: 'i3', last_id: 'i3' });
  t.deepEqual(await page('order=asc&limit=2&after=i4'), { ids: ['i5', 'i6'], has_more: true, first_id: 'i5', last_id: 'i6' });
  const unknown = await p.api(key, 'GET', `/v1/responses/${response.id}/input_items?before=nope`);
  t.is(unknown.status, 400);
  t.is(unknown.json.error.param, 'before');
});
