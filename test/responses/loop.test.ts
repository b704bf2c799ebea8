import test from 'ava';
import { BadRequestError, NotFoundError } from 'openai';
import { lastToolOutput, MODEL, startResponsesPlatform, streamResponse, type ResponsesPlatform } from './harness.js';
import { NO_TOOLS_ANSWER } from '../fakes/openai-upstream.js';

// The tool loop through the edge with the official openai SDK: llm-api is asked service to
// service, python_exec runs on mcp-tools through an MCP client, and the stored response is read back.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

test('python_exec with print(6*7), then an answer quoting it: 42, and the call and its output in order', async (t) => {
  p.fake.script('six-times-seven', [
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6*7)' } }] },
    { content: (messages) => `The result is ${lastToolOutput(messages).match(/\d+/)?.[0] ?? 'unknown'}.` },
  ]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'Compute 6*7 #script:six-times-seven' });
  t.is(response.status, 'completed');
  t.regex(response.id, /^resp_/);
  t.true(response.output_text.includes('42'), response.output_text);
  t.deepEqual(
    response.output.map((item) => item.type),
    ['mcp_call', 'message'],
  );
  const call = response.output[0] as any;
  t.is(call.name, 'python_exec');
  t.deepEqual(JSON.parse(call.arguments), { code: 'print(6*7)' });
  t.true(String(call.output).includes('42'));
  t.is(call.status, 'completed');
  t.true(response.usage!.total_tokens > 0);
  t.is((response as any).step_usage.length, 2);

  // The model saw the tool's output as a tool message on the second step.
  const [first, second] = p.fake.scriptRequests('six-times-seven');
  t.truthy(first!.body.tools.find((tool: any) => tool.function.name === 'python_exec'));
  t.true(lastToolOutput(second!.body.messages).includes('42'));

  const stored = await client.responses.retrieve(response.id);
  t.deepEqual(stored.output, response.output);
  t.is(stored.status, 'completed');
});

test('input_items paginate as the SDK expects; delete removes the response', async (t) => {
  p.fake.script('plain', [{ content: 'ok' }]);
  const { client } = await p.newClient();
  const input = Array.from({ length: 5 }, (_, i) => ({ role: 'user' as const, content: `item ${i}${i === 4 ? ' #script:plain' : ''}` }));
  const response = await client.responses.create({ model: MODEL, input, tools: [] });
  const seen: string[] = [];
  for await (const item of client.responses.inputItems.list(response.id, { limit: 2, order: 'asc' })) seen.push((item as any).content[0].text);
  t.deepEqual(seen, ['item 0', 'item 1', 'item 2', 'item 3', 'item 4 #script:plain']);
  const page = await client.responses.inputItems.list(response.id, { limit: 2 });
  t.is((page.data[0] as any).content[0].text, 'item 4 #script:plain', 'newest first by default');

  const deleted: any = await client.responses.delete(response.id);
  t.like(deleted, { id: response.id, deleted: true });
  await t.throwsAsync(client.responses.retrieve(response.id), { instanceOf: NotFoundError });
});

test('input_items take limit as every list does: digits only, 1 to 100, 400s naming limit', async (t) => {
  p.fake.script('limits', [{ content: 'ok' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'hello #script:limits', tools: [] });
  const cases: Array<[string, RegExp]> = [
    ['1e1', /must be an integer/],
    [' 5', /must be an integer/],
    ['2.5', /must be an integer/],
    ['0', /must be between 1 and 100/],
    ['101', /must be between 1 and 100/],
  ];
  for (const [limit, message] of cases) {
    const error = await t.throwsAsync(client.responses.inputItems.list(response.id, { limit: limit as any }), { instanceOf: BadRequestError }, limit);
    t.is((error as BadRequestError).param, 'limit');
    t.regex((error as BadRequestError).message, message, limit);
  }
  const order = await t.throwsAsync(client.responses.inputItems.list(response.id, { order: 'sideways' as any }), { instanceOf: BadRequestError });
  t.is((order as BadRequestError).param, 'order');
  t.is((await client.responses.inputItems.list(response.id, { limit: 100 })).data.length, 1);
});

test("another user's response is a 404 on every route", async (t) => {
  p.fake.script('mine', [{ content: 'mine' }]);
  const owner = await p.newClient();
  const other = await p.newClient();
  const response = await owner.client.responses.create({ model: MODEL, input: 'hello #script:mine', tools: [] });
  await t.throwsAsync(other.client.responses.retrieve(response.id), { instanceOf: NotFoundError });
  await t.throwsAsync(other.client.responses.inputItems.list(response.id), { instanceOf: NotFoundError });
  await t.throwsAsync(other.client.responses.cancel(response.id), { instanceOf: NotFoundError });
  await t.throwsAsync(other.client.responses.delete(response.id), { instanceOf: NotFoundError });
  t.is((await owner.client.responses.retrieve(response.id)).status, 'completed');
});

test('a failing tool and an invented tool become outputs the model sees; the loop goes on', async (t) => {
  p.fake.script('bad-tools', [
    {
      tool_calls: [
        { name: 'python_exec', arguments: { code: 'raise SystemExit(3)' } },
        { name: 'no_such_tool', arguments: { x: 1 } },
      ],
    },
    { content: 'I saw the errors.' },
  ]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'try #script:bad-tools' });
  t.is(response.status, 'completed');
  const [exec, invented, message] = response.output as any[];
  t.is(exec.type, 'mcp_call');
  t.is(invented.type, 'mcp_call');
  t.is(invented.status, 'failed');
  t.regex(invented.error, /Tool 'no_such_tool' does not exist/);
  t.is(message.type, 'message');
  const second = p.fake.scriptRequests('bad-tools')[1]!;
  const toolMessages = second.body.messages.filter((m: any) => m.role === 'tool');
  t.is(toolMessages.length, 2);
  t.regex(toolMessages[1].content, /^Error: Tool 'no_such_tool' does not exist/);
  t.regex(JSON.stringify(toolMessages[0].content), /3|exit/i, 'the exit code of the failing run reaches the model');
});

test('the step cap: a model that keeps calling tools ends incomplete with reason max_steps', async (t) => {
  p.fake.script('forever', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }] }]);
  const { client } = await p.newClient();
  const capped = await client.responses.create({ model: MODEL, input: 'loop #script:forever', max_steps: 3 } as any);
  t.is(capped.status, 'incomplete');
  t.deepEqual(capped.incomplete_details, { reason: 'max_steps' } as any);
  t.is(capped.output.filter((i) => i.type === 'mcp_call').length, 3);

  p.fake.script('forever-8', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }]);
  const defaulted = await client.responses.create({ model: MODEL, input: 'loop #script:forever-8' });
  t.is(defaulted.status, 'incomplete');
  t.is(p.fake.scriptRequests('forever-8').length, 8, 'the default cap is 8 steps');

  const tooMany = await fetch(`${p.url}/v1/responses`, {
    method: 'POST',
    headers: { 'x-api-key': (await p.newUser()).key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'x', max_steps: 9 }),
  });
  t.is(tooMany.status, 400);
  t.is(((await tooMany.json()) as any).error.param, 'max_steps');
});

test('answer_on_last_step: the last step offers no tool call, so a model still calling tools answers with what it has', async (t) => {
  p.fake.script('answer-last', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }] }]);
  const { client } = await p.newClient();
  const answered = await client.responses.create({ model: MODEL, input: 'loop #script:answer-last', max_steps: 3, answer_on_last_step: true } as any);
  t.is(answered.status, 'completed');
  t.is(answered.incomplete_details, null);
  t.deepEqual(
    answered.output.map((i) => i.type),
    ['mcp_call', 'mcp_call', 'message'],
  );
  t.is(answered.output_text, NO_TOOLS_ANSWER);
  const steps = p.fake.scriptRequests('answer-last');
  t.deepEqual(
    steps.map((s) => s.body.tool_choice),
    ['auto', 'auto', 'none'],
  );
  t.true(steps[2]!.body.tools.length > 0, 'the tools stay declared: the history names them');

  // One step cannot both be required to call a tool and be asked to answer without one.
  const conflict = await fetch(`${p.url}/v1/responses`, {
    method: 'POST',
    headers: { 'x-api-key': (await p.newUser()).key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'x', tools: ['python_exec'], tool_choice: 'required', max_steps: 1, answer_on_last_step: true }),
  });
  t.is(conflict.status, 400);
  t.is(((await conflict.json()) as any).error.param, 'answer_on_last_step');
});

test('a client-executed function stops the loop and returns the call; its output continues the response', async (t) => {
  p.fake.script('weather', [{ tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] }, { content: (m) => `Weather: ${lastToolOutput(m)}` }]);
  const { client } = await p.newClient();
  const tools = [{ type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
  const first = await client.responses.create({ model: MODEL, input: 'weather? #script:weather', tools });
  t.is(first.status, 'completed');
  const call = first.output.find((i) => i.type === 'function_call') as any;
  t.is(call.name, 'get_weather');
  t.is(p.fake.scriptRequests('weather').length, 1, 'the loop stopped at the client function');

  const second = await client.responses.create({
    model: MODEL,
    previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21C' }],
    tools,
  });
  t.is(second.output_text, 'Weather: sunny, 21C');
});

test('model is required; a bad previous_response_id is a 400 naming it', async (t) => {
  const { key } = await p.newUser();
  const post = (body: unknown) =>
    fetch(`${p.url}/v1/responses`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const noModel = await post({ input: 'x' });
  t.is(noModel.status, 400);
  t.is(((await noModel.json()) as any).error.param, 'model');
  const unknownPrevious = await post({ model: MODEL, input: 'x', previous_response_id: 'resp_nope' });
  t.is(unknownPrevious.status, 400);
  const body: any = await unknownPrevious.json();
  t.is(body.error.code, 'previous_response_not_found');
  t.is(body.error.param, 'previous_response_id');
});

test('max_output_tokens is the budget of the whole response: each step is sent what is left, and a spent budget ends it incomplete', async (t) => {
  // Each scripted step reports 3 completion tokens; every step calls a tool that does not exist.
  p.fake.script('budget', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }]);
  const { client } = await p.newClient();
  const spent = await client.responses.create({ model: MODEL, input: 'x #script:budget', max_output_tokens: 16 });
  t.is(spent.status, 'incomplete');
  t.deepEqual(spent.incomplete_details, { reason: 'max_output_tokens' });
  t.deepEqual(
    p.fake.scriptRequests('budget').map((r) => r.body.max_completion_tokens),
    [16, 13, 10, 7, 4, 1],
  );
  t.is(spent.usage!.output_tokens, 18);

  p.fake.script('budget-stream', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }]);
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'x #script:budget-stream', max_output_tokens: 16 });
  t.is(events.at(-1).type, 'response.incomplete');
  t.deepEqual(final.incomplete_details, { reason: 'max_output_tokens' });
  t.is(p.fake.scriptRequests('budget-stream').length, 6);
});

test('max_output_tokens reached: incomplete with that reason; a tools subset by name, an unknown name is a 400', async (t) => {
  p.fake.script('cut', [{ content: 'cut off mid', finish_reason: 'length' }]);
  const { client } = await p.newClient();
  const cut = await client.responses.create({ model: MODEL, input: 'long #script:cut', max_output_tokens: 16, tools: [] });
  t.is(cut.status, 'incomplete');
  t.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
  t.is(p.fake.scriptRequests('cut')[0]!.body.max_completion_tokens, 16);

  p.fake.script('subset', [{ content: 'ok' }]);
  await client.responses.create({ model: MODEL, input: 'x #script:subset', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] } as any] });
  const offered = p.fake.scriptRequests('subset')[0]!.body.tools.map((tool: any) => tool.function.name);
  t.deepEqual(offered, ['python_exec']);

  const error: any = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['no_such_tool'] } as any] }));
  t.is(error.status, 400);
  t.is(error.param, 'tools[0]');
});

test("mcp_call items carry the server_label of the declared tool entry that offers the tool (the first of several), in JSON, in the stream and when stored; 'jan' without one", async (t) => {
  const call = { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }] };
  const { client } = await p.newClient();
  const labels = (output: any[]) => output.filter((item) => item.type === 'mcp_call').map((item) => item.server_label);

  p.fake.script('label-json', [call, { content: 'done' }]);
  const json = await client.responses.create({ model: MODEL, input: 'x #script:label-json', tools: [{ type: 'mcp', server_label: 'tools', allowed_tools: ['python_exec'] } as any] });
  t.deepEqual(labels(json.output), ['tools']);
  t.deepEqual(labels((await client.responses.retrieve(json.id)).output), ['tools'], 'as stored');

  p.fake.script('label-stream', [call, { content: 'done' }]);
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'x #script:label-stream', tools: [{ type: 'mcp', server_label: 'deepwiki', allowed_tools: ['python_exec'] } as any] });
  const itemEvents = events.filter((e) => (e.type === 'response.output_item.added' || e.type === 'response.output_item.done') && e.item.type === 'mcp_call');
  t.is(itemEvents.length, 2);
  for (const event of itemEvents) t.is(event.item.server_label, 'deepwiki', event.type);
  t.deepEqual(labels(final.output), ['deepwiki']);

  p.fake.script('label-first', [call, { content: 'done' }]);
  const several = await client.responses.create({
    model: MODEL,
    input: 'x #script:label-first',
    tools: [{ type: 'mcp', server_label: 'search', allowed_tools: ['google_search'] }, { type: 'mcp', server_label: 'code', allowed_tools: ['python_exec'] }, { type: 'mcp', server_label: 'all' }] as any,
  });
  t.deepEqual(labels(several.output), ['code'], 'the first entry that offers python_exec, not the first entry');

  p.fake.script('label-bare', [call, { content: 'done' }]);
  const bare = await client.responses.create({
    model: MODEL,
    input: 'x #script:label-bare',
    tools: ['python_exec', { type: 'mcp', server_label: 'later', allowed_tools: ['python_exec'] }] as any,
  });
  t.deepEqual(labels(bare.output), ['jan'], 'a bare name offers it first, under the label its echo carries');

  p.fake.script('label-default', [call, { content: 'done' }]);
  const platform = await client.responses.create({ model: MODEL, input: 'x #script:label-default' });
  t.deepEqual(labels(platform.output), ['jan'], 'tools omitted: the platform label');
});
