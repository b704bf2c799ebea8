import { getEventListeners } from 'node:events';
import test from 'ava';
import { BadRequestError, NotFoundError } from 'openai';
import { ManualClock, type Principal } from '../../services/kit/index.js';
import { createToolsPort } from '../../services/response-api/responses/ports.js';
import { MODEL, startResponsesPlatform, streamResponse, type ResponsesPlatform } from '../responses/harness.js';

// Edge cases of the Response API through the edge with the official openai SDK: a tool_choice or
// a tool list the model could not follow is a 400 naming the field before any step; a conversation
// or a model that cannot be found is named; a step stopped by the provider's content filter ends the
// response incomplete with that reason; a response's tool calls leave no listener on its signal.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

test('a tool_choice the model could not follow is a 400 naming it, before any step runs', async (t) => {
  p.fake.script('never-choice', [{ content: 'never asked' }]);
  const { client } = await p.newClient();
  const input = 'x #script:never-choice';
  const fn = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false };
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ tool_choice: { type: 'function', name: 'no_such_tool' } }, 'tool_choice.name'],
    [{ tools: [fn], tool_choice: { type: 'function', name: 'python_exec' } }, 'tool_choice.name'],
    [{ tools: ['python_exec'], tool_choice: { type: 'mcp', server_label: 'jan', name: 'scrape' } }, 'tool_choice.name'],
    [{ tools: [fn], tool_choice: { type: 'mcp', server_label: 'jan', name: 'get_weather' } }, 'tool_choice.name'],
    [{ tools: [], tool_choice: 'required' }, 'tool_choice'],
    [{ tools: [], tool_choice: { type: 'function', name: 'get_weather' } }, 'tool_choice.name'],
    [{ tools: [fn], tool_choice: { type: 'mcp', server_label: 'jan' } }, 'tool_choice'],
  ];
  for (const [fields, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input, ...fields } as any), { instanceOf: BadRequestError }, JSON.stringify(fields));
    t.is((error as BadRequestError).param, param, JSON.stringify(fields));
    // A stream is refused the same way, as plain JSON before any event.
    const streamed = await t.throwsAsync(client.responses.create({ model: MODEL, input, stream: true, ...fields } as any), { instanceOf: BadRequestError });
    t.is((streamed as BadRequestError).param, param);
  }
  t.is(p.fake.scriptRequests('never-choice').length, 0, 'nothing reached the model');
});

test('tool_choice naming an offered tool reaches the first step; {type: "mcp"} without a name requires a platform tool', async (t) => {
  p.fake.script('choice-named', [{ content: 'ok' }]);
  p.fake.script('choice-mcp', [{ content: 'ok' }]);
  p.fake.script('choice-fn', [{ content: 'ok' }]);
  const { client } = await p.newClient();
  const fn = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false };

  const named = await client.responses.create({ model: MODEL, input: 'x #script:choice-named', tools: ['python_exec' as any], tool_choice: { type: 'mcp', server_label: 'jan', name: 'python_exec' } });
  t.is(named.status, 'completed');
  t.deepEqual(p.fake.scriptRequests('choice-named')[0]!.body.tool_choice, { type: 'function', function: { name: 'python_exec' } });

  // OpenAI's ToolChoiceMcp takes `name` as optional: any tool of that server must be called.
  const anyPlatformTool = await client.responses.create({ model: MODEL, input: 'x #script:choice-mcp', tools: ['python_exec' as any], tool_choice: { type: 'mcp', server_label: 'jan' } as any });
  t.is(anyPlatformTool.status, 'completed');
  t.deepEqual(anyPlatformTool.tool_choice, { type: 'mcp', server_label: 'jan' } as any, 'echoed as asked');
  t.is(p.fake.scriptRequests('choice-mcp')[0]!.body.tool_choice, 'required');
  // The SDK's type allows `name: null` as well.
  await client.responses.create({ model: MODEL, input: 'x #script:choice-mcp', tools: ['python_exec' as any], tool_choice: { type: 'mcp', server_label: 'jan', name: null } as any });
  t.is(p.fake.scriptRequests('choice-mcp')[1]!.body.tool_choice, 'required');

  const clientFunction = await client.responses.create({ model: MODEL, input: 'x #script:choice-fn', tools: [fn], tool_choice: { type: 'function', name: 'get_weather' } });
  t.is(clientFunction.status, 'completed');
  t.deepEqual(p.fake.scriptRequests('choice-fn')[0]!.body.tool_choice, { type: 'function', function: { name: 'get_weather' } });
});

test('two tools of one name are a 400 naming the second, before any step runs', async (t) => {
  p.fake.script('never-dup', [{ content: 'never asked' }]);
  const { client } = await p.newClient();
  const fn = (name: string) => ({ type: 'function' as const, name, parameters: { type: 'object', properties: {} }, strict: false });
  const cases: Array<[unknown[], string]> = [
    [[fn('lookup'), fn('lookup')], 'tools[1].name'],
    [['python_exec', fn('python_exec')], 'tools[1].name'],
    [[fn('python_exec'), { type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] }], 'tools[0].name'],
  ];
  for (const [tools, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x #script:never-dup', tools } as any), { instanceOf: BadRequestError }, JSON.stringify(tools));
    t.is((error as BadRequestError).param, param);
  }
  // With the platform tools offered by default (tools omitted) there is no function to collide with.
  t.is(p.fake.scriptRequests('never-dup').length, 0, 'nothing reached the model');
});

test("a conversation that cannot be read is a 404 naming conversation; an unknown model's 404 names model", async (t) => {
  const { client } = await p.newClient();
  const other = await p.newClient();
  const foreign = await other.client.conversations.create({});
  for (const conversation of ['conv_doesnotexist', foreign.id]) {
    for (const truncation of ['disabled', 'auto'] as const) {
      const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', tools: [], conversation, truncation }), { instanceOf: NotFoundError }, `${conversation} ${truncation}`);
      t.is((error as NotFoundError).param, 'conversation', `${conversation} ${truncation}`);
    }
  }
  const model = await t.throwsAsync(client.responses.create({ model: 'no-such-model', input: 'x', tools: [] }), { instanceOf: NotFoundError });
  t.is((model as NotFoundError).code, 'model_not_found');
  t.is((model as NotFoundError).param, 'model');
});

test("a step stopped by the provider's content filter ends incomplete with reason content_filter, in JSON and in the stream", async (t) => {
  p.fake.script('filtered-json', [{ content: 'partial', finish_reason: 'content_filter' }]);
  p.fake.script('filtered-stream', [{ content: 'partial', finish_reason: 'content_filter' }]);
  const { client } = await p.newClient();
  const json = await client.responses.create({ model: MODEL, input: 'x #script:filtered-json', tools: [] });
  t.is(json.status, 'incomplete');
  t.deepEqual(json.incomplete_details, { reason: 'content_filter' });
  t.like(json.output[0], { type: 'message', status: 'incomplete' });
  t.is(json.output_text, 'partial');
  t.is((await client.responses.retrieve(json.id)).status, 'incomplete');

  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'x #script:filtered-stream', tools: [] });
  t.is(events.at(-1).type, 'response.incomplete');
  t.deepEqual(final.incomplete_details, { reason: 'content_filter' });
  t.like(final.output[0], { type: 'message', status: 'incomplete' });
});

test("a response's tool calls leave no abort listener on its signal (a cancel then reaches only the call in flight)", async (t) => {
  const { user } = await p.newUser();
  const principal: Principal = { userId: user.id, subject: user.id, email: user.email, username: user.username, authMethod: 'apikey', isAdmin: false, isGuest: false };
  const port = createToolsPort({ baseUrl: () => p.serviceUrl('mcp-tools'), gatewayToken: p.gatewaySecret, clock: new ManualClock(), listCacheMs: 30_000 });
  const response = new AbortController();
  const session = await port.open(principal, new AbortController().signal);
  try {
    for (let i = 0; i < 3; i++) {
      const answer = await session.call('file_search_query', { query: 'otters', top_k: 1 }, { signal: response.signal, timeoutMs: 10_000 });
      t.false(answer.isError, answer.output);
    }
    t.is(getEventListeners(response.signal, 'abort').length, 0);
  } finally {
    await session.close();
  }
});

test('an unknown model is a 404 naming model before a stream or a background response starts; nothing is stored', async (t) => {
  const { client, userId } = await p.newClient();
  const streamed = await t.throwsAsync(client.responses.create({ model: 'no-such-model', input: 'x', tools: [], stream: true }), { instanceOf: NotFoundError });
  t.is((streamed as NotFoundError).code, 'model_not_found');
  t.is((streamed as NotFoundError).param, 'model');
  const background = await t.throwsAsync(client.responses.create({ model: 'no-such-model', input: 'x', tools: [], background: true }), { instanceOf: NotFoundError });
  t.is((background as NotFoundError).param, 'model');
  const withHistory = await t.throwsAsync(client.responses.create({ model: 'no-such-model', input: 'x', tools: [], stream: true, truncation: 'auto' }), { instanceOf: NotFoundError });
  t.is((withHistory as NotFoundError).param, 'model');
  t.is((await p.runtime.db.knex('responses').where({ user_id: userId })).length, 0, 'no response was created');

  // A model that exists streams as before.
  p.fake.script('known-model', [{ content: 'fine' }]);
  const { final } = await streamResponse(t, client, { model: MODEL, input: 'x #script:known-model', tools: [] });
  t.is(final.status, 'completed');
});

test("continuing a response that returned a client function call without the call's output is a 400 naming input, before any step", async (t) => {
  p.fake.script('unanswered', [{ tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] }, { content: 'never asked' }]);
  const { client } = await p.newClient();
  const tools = [{ type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
  const first = await client.responses.create({ model: MODEL, input: 'weather? #script:unanswered', tools });
  const call = first.output.find((i) => i.type === 'function_call') as { call_id: string };
  const error = await t.throwsAsync(client.responses.create({ model: MODEL, previous_response_id: first.id, input: 'and tomorrow?', tools }), { instanceOf: BadRequestError });
  t.is((error as BadRequestError).param, 'input');
  t.regex((error as BadRequestError).message, new RegExp(`No tool output found for function call ${call.call_id}`));
  // Sent in the input itself, a call and no output is refused the same way.
  const inline = await t.throwsAsync(
    client.responses.create({ model: MODEL, input: [{ type: 'function_call', call_id: 'call_inline', name: 'get_weather', arguments: '{}' }, { role: 'user', content: 'go on' }] as any, tools }),
    { instanceOf: BadRequestError },
  );
  t.is((inline as BadRequestError).param, 'input');
  t.is(p.fake.scriptRequests('unanswered').length, 1, 'only the first response reached the model');
  // With the output, the response goes on.
  const second = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: 'snow' }], tools });
  t.is(second.output_text, 'never asked');
});

test('a step the token limit cut inside its tool calls runs none of them: the response ends incomplete (max_output_tokens)', async (t) => {
  const cut = { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }], finish_reason: 'length' };
  p.fake.script('cut-calls-json', [cut, { content: 'never asked' }]);
  p.fake.script('cut-calls-stream', [cut, { content: 'never asked' }]);
  const { client } = await p.newClient();
  const json = await client.responses.create({ model: MODEL, input: 'run #script:cut-calls-json', tools: ['python_exec' as any] });
  t.is(json.status, 'incomplete');
  t.deepEqual(json.incomplete_details, { reason: 'max_output_tokens' });
  t.false(json.output.some((item) => item.type === 'mcp_call' || item.type === 'function_call'), 'no call was run or returned');
  t.is(p.fake.scriptRequests('cut-calls-json').length, 1, 'the loop did not go on');

  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'run #script:cut-calls-stream', tools: ['python_exec' as any] });
  t.like(final, { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
  t.is(events.at(-1).type, 'response.incomplete');
  t.false(events.some((e: any) => e.type === 'response.mcp_call.in_progress'));
  t.is(p.fake.scriptRequests('cut-calls-stream').length, 1);
});

test("a function_call_output given as input_text parts reaches the model as their text, and is kept as parts; an image part is a 400 naming it", async (t) => {
  p.fake.script('parts-call', [{ tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] }]);
  p.fake.script('parts-answer', [{ content: 'noted' }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const tools = [{ type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false }];
  const first = await client.responses.create({ model: MODEL, input: 'weather? #script:parts-call', tools, conversation: conversation.id });
  const call = first.output.find((i) => i.type === 'function_call') as any;
  t.truthy(call);

  const parts = [
    { type: 'input_text' as const, text: 'cold, ' },
    { type: 'input_text' as const, text: '-3C #script:parts-answer' },
  ];
  const second = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: parts }], tools });
  t.is(second.status, 'completed');
  const sent = p.fake.scriptRequests('parts-answer')[0]!.body.messages as Array<Record<string, unknown>>;
  t.deepEqual(sent.at(-1), { role: 'tool', tool_call_id: call.call_id, content: 'cold, -3C #script:parts-answer' });
  const listed = (await client.responses.inputItems.list(second.id)).data[0] as any;
  t.is(listed.type, 'function_call_output');
  t.deepEqual(listed.output, parts);
  // The conversation took the turn, the output as its parts.
  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  const stored = items.find((item) => item.type === 'function_call_output');
  t.deepEqual(stored?.output, parts);

  p.fake.script('parts-never', [{ content: 'never' }]);
  const refused = await t.throwsAsync(
    client.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: [{ type: 'input_text', text: 'see #script:parts-never' }, { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] }],
      tools,
    }),
    { instanceOf: BadRequestError },
  );
  t.is((refused as BadRequestError).param, 'input[0].output[1].type');
  t.is(p.fake.scriptRequests('parts-never').length, 0);
});

test('tool_choice allowed_tools offers the model only the tools it lists (auto or required); a tool it lists that is not offered is a 400 naming it', async (t) => {
  const { client } = await p.newClient();
  const fn = (name: string) => ({ type: 'function' as const, name, parameters: { type: 'object', properties: {} }, strict: false });
  const tools = [fn('get_weather'), fn('get_time'), 'python_exec' as any];
  p.fake.script('allowed-auto', [{ content: 'ok' }]);
  const choice = { type: 'allowed_tools' as const, mode: 'auto' as const, tools: [{ type: 'function', name: 'get_time' }] };
  const auto = await client.responses.create({ model: MODEL, input: 'x #script:allowed-auto', tools, tool_choice: choice });
  t.is(auto.status, 'completed');
  t.deepEqual(auto.tool_choice, choice, 'echoed as asked');
  t.is(auto.tools.length, 3, 'every tool declared is echoed');
  const [autoStep] = p.fake.scriptRequests('allowed-auto');
  t.deepEqual(
    autoStep!.body.tools.map((tool: any) => tool.function.name),
    ['get_time'],
  );
  t.is(autoStep!.body.tool_choice, 'auto');

  // required with the platform's tools (an mcp entry without a name allows every platform tool offered): the first step must call one.
  p.fake.script('allowed-required', [{ content: 'ok' }]);
  await client.responses.create({ model: MODEL, input: 'x #script:allowed-required', tools, tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'mcp', server_label: 'jan' }] } });
  const [requiredStep] = p.fake.scriptRequests('allowed-required');
  t.deepEqual(
    requiredStep!.body.tools.map((tool: any) => tool.function.name),
    ['python_exec'],
  );
  t.is(requiredStep!.body.tool_choice, 'required');

  p.fake.script('allowed-never', [{ content: 'never' }]);
  const cases: Array<[unknown, string]> = [
    [{ type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'no_such_function' }] }, 'tool_choice.tools[0]'],
    [{ type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'get_time' }, { type: 'mcp', server_label: 'jan', name: 'scrape' }] }, 'tool_choice.tools[1]'],
    [{ type: 'allowed_tools', mode: 'sometimes', tools: [{ type: 'function', name: 'get_time' }] }, 'tool_choice.mode'],
    [{ type: 'allowed_tools', mode: 'auto', tools: [] }, 'tool_choice.tools'],
    [{ type: 'web_search_preview' }, 'tool_choice.type'],
  ];
  for (const [toolChoice, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x #script:allowed-never', tools, tool_choice: toolChoice as any }), { instanceOf: BadRequestError }, JSON.stringify(toolChoice));
    t.is((error as BadRequestError).param, param, JSON.stringify(toolChoice));
  }
  t.is(p.fake.scriptRequests('allowed-never').length, 0);
});

test('an mcp tool asking for approval before its calls is a 400 naming require_approval (the platform runs its tools unasked); never is taken', async (t) => {
  const { client } = await p.newClient();
  p.fake.script('approval-never', [{ content: 'never' }]);
  const cases: unknown[] = ['always', { always: { tool_names: ['python_exec'] } }];
  for (const requireApproval of cases) {
    const error = await t.throwsAsync(
      client.responses.create({ model: MODEL, input: 'x #script:approval-never', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'], require_approval: requireApproval } as any] }),
      { instanceOf: BadRequestError },
      JSON.stringify(requireApproval),
    );
    t.is((error as BadRequestError).param?.startsWith('tools[0].require_approval'), true, (error as BadRequestError).param ?? 'no param');
  }
  t.is(p.fake.scriptRequests('approval-never').length, 0);
  p.fake.script('approval-none', [{ content: 'ran' }]);
  const taken = await client.responses.create({ model: MODEL, input: 'x #script:approval-none', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'], require_approval: 'never' } as any] });
  t.is(taken.output_text, 'ran');
});
