import test from 'ava';
import { BadRequestError, InternalServerError, RateLimitError } from 'openai';
import { waitFor } from '../helpers/wait.js';
import { lastToolOutput, MODEL, REASONING_MODEL, startResponsesPlatform, streamResponse, type ResponsesPlatform } from './harness.js';

// Conformance of the Responses API with the official openai SDK: `text.format` and `reasoning`
// reach each step and are echoed; the gateway's own output items are accepted back as input; a
// foreground JSON response that fails before any output is an HTTP error of the right class; a
// foreground response cannot be streamed again (only a background one's events are kept); a message cut off at max_output_tokens is incomplete.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const rowsOf = (userId: string) => p.runtime.db.knex('responses').where({ user_id: userId }).select('status', 'body');

const answerSchema = { type: 'object', properties: { answer: { type: 'number' } }, required: ['answer'], additionalProperties: false };

test('text.format json_schema reaches every step as response_format; parse() gives output_parsed; text and reasoning are echoed', async (t) => {
  // A tool step first (a call naming no tool: its error is the output), so that the constraint is seen on every step.
  p.fake.script('structured', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }, { content: (m) => JSON.stringify({ answer: lastToolOutput(m).startsWith('Error:') ? 42 : 0 }) }]);
  const { client } = await p.newClient();
  const format = { type: 'json_schema' as const, name: 'answer', schema: answerSchema, strict: true, description: 'The number' };
  const parsed = await client.responses.parse({ model: REASONING_MODEL, input: 'compute #script:structured', text: { format }, reasoning: { effort: 'low', summary: 'auto' } });
  t.is(parsed.status, 'completed');
  t.deepEqual(parsed.output_parsed, { answer: 42 });
  t.deepEqual(parsed.text, { format });
  t.deepEqual(parsed.reasoning, { effort: 'low', summary: 'auto' });

  const steps = p.fake.scriptRequests('structured');
  t.is(steps.length, 2);
  for (const step of steps) {
    t.deepEqual(step.body.response_format, { type: 'json_schema', json_schema: { name: 'answer', schema: answerSchema, strict: true, description: 'The number' } }, 'every step is constrained');
    t.is(step.body.reasoning_effort, 'low');
  }
  const stored = await client.responses.retrieve(parsed.id);
  t.deepEqual(stored.text, { format });
});

test('json_object is sent as such; text (the default) sends no response_format and is echoed with null reasoning', async (t) => {
  p.fake.script('json-object', [{ content: '{"ok":true}' }]);
  p.fake.script('plain-text', [{ content: 'plain' }]);
  const { client } = await p.newClient();
  const json = await client.responses.create({ model: MODEL, input: 'json please #script:json-object', tools: [], text: { format: { type: 'json_object' }, verbosity: 'low' } });
  t.deepEqual(json.text, { format: { type: 'json_object' }, verbosity: 'low' });
  const [jsonStep] = p.fake.scriptRequests('json-object');
  t.deepEqual(jsonStep!.body.response_format, { type: 'json_object' });
  t.is(jsonStep!.body.verbosity, 'low');

  const plain = await client.responses.create({ model: MODEL, input: 'hi #script:plain-text', tools: [], text: { format: { type: 'text' } } });
  t.deepEqual(plain.text, { format: { type: 'text' } });
  t.deepEqual(plain.reasoning, { effort: null, summary: null });
  const [plainStep] = p.fake.scriptRequests('plain-text');
  t.false('response_format' in plainStep!.body);
  t.false('reasoning_effort' in plainStep!.body);
});

test('bad text.format and reasoning shapes are 400s naming the field; nothing goes upstream', async (t) => {
  p.fake.script('never-structured', [{ content: 'must not be asked' }]);
  const { client } = await p.newClient();
  const input = 'x #script:never-structured';
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ text: { format: { type: 'json_schema', name: 'answer' } } }, 'text.format.schema'],
    [{ text: { format: { type: 'json_schema', schema: answerSchema } } }, 'text.format.name'],
    [{ text: { format: { type: 'json_schema', name: 'has spaces', schema: answerSchema } } }, 'text.format.name'],
    [{ text: { format: { type: 'xml' } } }, 'text.format.type'],
    [{ text: { verbosity: 'loud' } }, 'text.verbosity'],
    [{ reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
  ];
  for (const [fields, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input, tools: [], ...fields } as any), { instanceOf: BadRequestError }, JSON.stringify(fields));
    t.is((error as BadRequestError).param, param, JSON.stringify(fields));
  }
  t.is(p.fake.scriptRequests('never-structured').length, 0);
});

test("the stateless pattern: a response's own output (mcp_call and message) is accepted back as input and replayed", async (t) => {
  p.fake.script('stateless-1', [{ tool_calls: [{ name: 'no_such_tool', arguments: { n: 42 } }] }, { content: 'It is 42.' }]);
  const { client } = await p.newClient();
  const first = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'compute #script:stateless-1' }], store: false });
  t.deepEqual(
    first.output.map((item) => item.type),
    ['mcp_call', 'message'],
  );

  p.fake.script('stateless-2', [{ content: 'You asked me to compute.' }]);
  const second = await client.responses.create({
    model: MODEL,
    tools: [],
    input: [{ role: 'user', content: 'compute' }, ...(first.output as any[]), { role: 'user', content: 'what did I ask? #script:stateless-2' }],
  });
  t.is(second.output_text, 'You asked me to compute.');
  const call = first.output[0] as any;
  const sent = p.fake.scriptRequests('stateless-2')[0]!.body.messages;
  t.deepEqual(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'assistant', 'user'],
  );
  t.deepEqual(sent[1].tool_calls, [{ id: call.id, type: 'function', function: { name: 'no_such_tool', arguments: '{"n":42}' } }]);
  t.is(sent[2].tool_call_id, call.id);
  t.is(sent[2].content, `Error: ${call.error}`);
  t.is(sent[3].content, 'It is 42.');

  const items: any[] = [];
  for await (const item of client.responses.inputItems.list(second.id, { order: 'asc' })) items.push(item);
  t.deepEqual(
    items.map((item) => item.type),
    ['message', 'mcp_call', 'message', 'message'],
  );
  t.like(items[1], { id: call.id, name: 'no_such_tool', server_label: 'jan', status: 'failed', error: call.error });
});

test('reasoning and mcp_list_tools items are accepted and not sent; an assistant refusal is that turn’s text; a failed mcp_call’s error object is its text', async (t) => {
  p.fake.script('other-items', [{ content: 'ok' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({
    model: MODEL,
    tools: [],
    input: [
      { role: 'user', content: 'can you help?' },
      { type: 'reasoning', id: 'rs_prior', summary: [{ type: 'summary_text', text: 'SECRET PLAN' }] },
      { type: 'mcp_list_tools', id: 'mcpl_prior', server_label: 'jan', tools: [{ name: 'python_exec', input_schema: { type: 'object' } }] },
      { type: 'message', role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] },
      { type: 'mcp_call', id: 'mcp_prior', server_label: 'jan', name: 'python_exec', arguments: '{}', output: null, error: { type: 'tool_execution_error', message: 'boom' } },
      { type: 'mcp_call', id: 'mcp_done', server_label: 'jan', name: 'python_exec', arguments: '{"code":"print(1)"}', output: '1\n', error: null, status: 'completed' },
      { role: 'user', content: 'why not? #script:other-items' },
    ] as any,
  });
  t.is(response.status, 'completed');
  const sent = p.fake.scriptRequests('other-items')[0]!.body.messages;
  t.false(JSON.stringify(sent).includes('SECRET PLAN'), 'a reasoning summary is not prompt input');
  t.deepEqual(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'assistant', 'tool', 'assistant', 'tool', 'user'],
  );
  t.is(sent[1].content, 'I cannot help with that.');
  t.deepEqual(sent[2].tool_calls, [{ id: 'mcp_prior', type: 'function', function: { name: 'python_exec', arguments: '{}' } }]);
  t.deepEqual(sent[3], { role: 'tool', tool_call_id: 'mcp_prior', content: 'Error: boom' });
  t.is(sent[4].tool_calls[0].id, 'mcp_done');
  t.deepEqual(sent[5], { role: 'tool', tool_call_id: 'mcp_done', content: '1\n' });

  const items: any[] = [];
  for await (const item of client.responses.inputItems.list(response.id, { order: 'asc' })) items.push(item);
  t.deepEqual(
    items.map((item) => item.type),
    ['message', 'reasoning', 'mcp_list_tools', 'message', 'mcp_call', 'mcp_call', 'message'],
  );
  t.is(items[4].error, 'boom');
});

test('item_reference, a refusal in a user message, an image detail the chat API does not take and an mcp_call without a name are 400s naming the field', async (t) => {
  p.fake.script('never-items', [{ content: 'must not be asked' }]);
  const { client } = await p.newClient();
  const cases: Array<[unknown[], string]> = [
    [[{ type: 'item_reference', id: 'msg_abc' }], 'input[0].type'],
    [[{ role: 'user', content: [{ type: 'refusal', refusal: 'no' }] }], 'input[0].content[0].type'],
    [[{ role: 'assistant', content: [{ type: 'refusal' }] }], 'input[0].content[0].refusal'],
    [[{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png', detail: 'original' }] }], 'input[0].content[0].detail'],
    [[{ role: 'user', content: 'x' }, { type: 'mcp_call', arguments: '{}' }], 'input[1].name'],
    [[{ type: 'mcp_list_tools', tools: [{ description: 'nameless' }] }], 'input[0].tools[0].name'],
  ];
  for (const [input, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, tools: [], input: [...input, { role: 'user', content: 'x #script:never-items' }] as any }), { instanceOf: BadRequestError }, param);
    t.is((error as BadRequestError).param, param);
  }
  t.is(p.fake.scriptRequests('never-items').length, 0);
});

test('a foreground JSON response failing before any output is the HTTP error of its class; the stored row is failed', async (t) => {
  const { client, userId } = await p.newClient();
  const rateLimited = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'hello #fail:429', tools: [] }), { instanceOf: RateLimitError });
  t.is((rateLimited as RateLimitError).status, 429);
  t.regex((rateLimited as RateLimitError).headers?.get('retry-after') ?? '', /^\d+$/, "llm-api's retry-after is passed on");
  const refused = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'hello #fail:400', tools: [] }), { instanceOf: BadRequestError });
  t.is((refused as BadRequestError).status, 400);
  const broken = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'hello #fail:500', tools: [] }), { instanceOf: InternalServerError });
  t.is((broken as InternalServerError).status, 502);
  t.is((broken as InternalServerError).code, 'upstream_error');

  const rows = await rowsOf(userId);
  t.is(rows.length, 3, 'each failed response is stored');
  t.true(rows.every((row: any) => row.status === 'failed'));
  t.deepEqual(rows.map((row: any) => row.body.error.code).sort(), ['invalid_prompt', 'rate_limit_exceeded', 'server_error']);
});

test('a failure after output keeps 200 with status failed; streaming and background failures stay response.failed / failed', async (t) => {
  p.fake.script('late-failure', [
    { tool_calls: [{ name: 'no_such_tool', arguments: {} }] },
    {
      content: () => {
        throw new Error('the provider broke on the second step');
      },
    },
  ]);
  const { client } = await p.newClient();
  const late = await client.responses.create({ model: MODEL, input: 'go #script:late-failure' });
  t.is(late.status, 'failed');
  t.is(late.error?.code, 'server_error');
  t.deepEqual(
    late.output.map((item) => item.type),
    ['mcp_call'],
  );

  const { final } = await streamResponse(t, client, { model: MODEL, input: 'hello #fail:429', tools: [] });
  t.is(final.status, 'failed');
  t.is(final.error.code, 'rate_limit_exceeded');

  const queued = await client.responses.create({ model: MODEL, input: 'hello #fail:429', tools: [], background: true });
  t.is(queued.status, 'queued');
  const settled = await waitFor(
    async () => {
      const current = await client.responses.retrieve(queued.id);
      return current.status === 'queued' || current.status === 'in_progress' ? null : current;
    },
    20_000,
    'the background response ending',
  );
  t.is(settled.status, 'failed');
  t.is(settled.error?.code, 'rate_limit_exceeded');
});

test('GET /v1/responses/{id}?stream=true of a foreground response is a 400 naming stream; without it the JSON answer', async (t) => {
  p.fake.script('retrieve', [{ content: 'stored' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'hi #script:retrieve', tools: [] });
  const error = await t.throwsAsync(
    (async () => {
      for await (const _event of await client.responses.retrieve(response.id, { stream: true })) t.fail('no event is streamed');
    })(),
    { instanceOf: BadRequestError },
  );
  t.is((error as BadRequestError).param, 'stream');
  t.is((await client.responses.retrieve(response.id, { stream: false } as any)).output_text, 'stored');
  t.is((await client.responses.retrieve(response.id)).output_text, 'stored');
});

test('a message cut off at max_output_tokens is incomplete, in JSON and in the stream', async (t) => {
  p.fake.script('cut-json', [{ content: 'cut off mid', finish_reason: 'length' }]);
  p.fake.script('cut-stream', [{ content: 'cut off mid', finish_reason: 'length' }]);
  const { client } = await p.newClient();
  const json = await client.responses.create({ model: MODEL, input: 'long #script:cut-json', max_output_tokens: 16, tools: [] });
  t.is(json.status, 'incomplete');
  t.like(json.output[0], { type: 'message', status: 'incomplete' });
  t.is(json.output_text, 'cut off mid');

  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'long #script:cut-stream', max_output_tokens: 16, tools: [] });
  t.is(events.at(-1).type, 'response.incomplete');
  t.deepEqual(final.incomplete_details, { reason: 'max_output_tokens' });
  t.like(final.output[0], { type: 'message', status: 'incomplete' });
  const done = events.find((e) => e.type === 'response.output_item.done');
  t.is(done.item.status, 'incomplete');
  t.is(done.item.content[0].text, 'cut off mid');
});
