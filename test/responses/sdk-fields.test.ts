import test from 'ava';
import OpenAI, { BadRequestError, NotFoundError } from 'openai';
import { MODEL, REASONING_MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// Fields of the official SDK's Responses types: every `ReasoningEffort` level reaches the step as
// sent; function tools echo `parameters` and `strict` (null when left out); the optional request
// fields the SDK's `Response` carries are echoed; input the model could not be given as sent is a
// 400 naming it; the SDK's routes this server does not serve are a 404 naming the path; an mcp
// tool's allowed_tools filter narrows the tools offered; a function tool's Responses-only fields are
// not sent to the provider; a prompt template (which the platform does not keep) is a 400.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

/** Every level of the installed SDK's `ReasoningEffort` (a level it drops fails to compile here; one it adds is missing below). */
const EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const satisfies ReadonlyArray<NonNullable<import('openai').OpenAI.ReasoningEffort>>;

test('every reasoning.effort level the SDK lists is accepted, sent to the step as reasoning_effort unchanged and echoed', async (t) => {
  const { client } = await p.newClient();
  for (const effort of EFFORTS) {
    p.fake.script(`effort-${effort}`, [{ content: 'ok' }]);
    const response = await client.responses.create({ model: REASONING_MODEL, input: `think #script:effort-${effort}`, tools: [], reasoning: { effort } });
    t.is(response.status, 'completed', effort);
    t.deepEqual(response.reasoning, { effort, summary: null });
    const [step] = p.fake.scriptRequests(`effort-${effort}`);
    t.is(step!.body.reasoning_effort, effort);
  }
});

test('function tools are echoed with parameters and strict, null when the client left them out', async (t) => {
  p.fake.script('echo-tools', [{ content: 'no call' }]);
  const { client } = await p.newClient();
  const given = { type: 'function', name: 'given', parameters: { type: 'object', properties: { a: { type: 'string' } } }, strict: true, description: 'has all' };
  const response = await client.responses.create({ model: MODEL, input: 'x #script:echo-tools', tools: [{ type: 'function', name: 'bare' } as any, given as any] });
  t.deepEqual(response.tools, [{ type: 'function', name: 'bare', parameters: null, strict: null }, given]);
  t.deepEqual((await client.responses.retrieve(response.id)).tools, response.tools);
  // The model is still offered an (empty) object schema for the bare one.
  const [step] = p.fake.scriptRequests('echo-tools');
  t.deepEqual(step!.body.tools[0].function, { name: 'bare', parameters: { type: 'object', properties: {} } });
});

test("a function tool's Responses-only fields (defer_loading, output_schema, allowed_callers) are echoed but never sent to the provider", async (t) => {
  p.fake.script('fn-extras', [{ content: 'no call' }]);
  const { client } = await p.newClient();
  const tool: OpenAI.Responses.FunctionTool = {
    type: 'function',
    name: 'lookup',
    description: 'finds a thing',
    parameters: { type: 'object', properties: { q: { type: 'string' } } },
    strict: false,
    defer_loading: false,
    output_schema: { type: 'object' },
    allowed_callers: ['direct'],
  };
  const response = await client.responses.create({ model: MODEL, input: 'x #script:fn-extras', tools: [tool] });
  t.is(response.status, 'completed');
  t.deepEqual(response.tools, [tool]);
  const [step] = p.fake.scriptRequests('fn-extras');
  t.deepEqual(step!.body.tools, [{ type: 'function', function: { name: 'lookup', description: 'finds a thing', parameters: tool.parameters, strict: false } }]);
});

test('a prompt template is a 400 naming prompt (the platform has none), before any step; prompt: null is taken', async (t) => {
  p.fake.script('prompt-template', [{ content: 'must not be asked' }]);
  const { client } = await p.newClient();
  const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x #script:prompt-template', tools: [], prompt: { id: 'pmpt_123', variables: { city: 'Paris' } } }), { instanceOf: BadRequestError });
  t.is((error as BadRequestError).param, 'prompt');
  t.regex((error as BadRequestError).message, /prompt templates are not supported/);
  const streamed = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x #script:prompt-template', tools: [], prompt: { id: 'pmpt_123' }, stream: true }), { instanceOf: BadRequestError });
  t.is((streamed as BadRequestError).param, 'prompt');
  t.is(p.fake.scriptRequests('prompt-template').length, 0);
  p.fake.script('prompt-null', [{ content: 'ok' }]);
  t.is((await client.responses.create({ model: MODEL, input: 'x #script:prompt-null', tools: [], prompt: null })).status, 'completed');
});

test('user, safety_identifier, prompt_cache_key, service_tier and top_logprobs are echoed (null when absent; the tier served is default)', async (t) => {
  p.fake.script('echo-fields', [{ content: 'a' }, { content: 'b' }]);
  const { client } = await p.newClient();
  const sent = await client.responses.create({
    model: MODEL,
    input: 'x #script:echo-fields',
    tools: [],
    user: 'end-user-1',
    safety_identifier: 'hash-42',
    prompt_cache_key: 'cache-7',
    service_tier: 'flex',
    top_logprobs: 3,
  });
  t.like(sent, { user: 'end-user-1', safety_identifier: 'hash-42', prompt_cache_key: 'cache-7', service_tier: 'default', top_logprobs: 3 });
  t.like(await client.responses.retrieve(sent.id), { user: 'end-user-1', safety_identifier: 'hash-42', prompt_cache_key: 'cache-7', service_tier: 'default', top_logprobs: 3 });
  const absent = await client.responses.create({ model: MODEL, input: 'y #script:echo-fields', tools: [] });
  t.like(absent, { user: null, safety_identifier: null, prompt_cache_key: null, service_tier: 'default', top_logprobs: null });
  // Echoed only: no step is sent them.
  for (const step of p.fake.scriptRequests('echo-fields')) {
    for (const field of ['user', 'safety_identifier', 'prompt_cache_key', 'service_tier', 'top_logprobs']) t.false(field in step.body, field);
  }
  for (const [fields, param] of [
    [{ top_logprobs: 21 }, 'top_logprobs'],
    [{ service_tier: 'fast' }, 'service_tier'],
    [{ safety_identifier: 'x'.repeat(65) }, 'safety_identifier'],
    [{ user: 5 }, 'user'],
  ] as const) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'z', tools: [], ...fields } as any), { instanceOf: BadRequestError });
    t.is((error as BadRequestError).param, param);
  }
});

test('a function_call_output without output and an image in an assistant message are 400s naming them; nothing goes upstream', async (t) => {
  p.fake.script('never-altered', [{ content: 'must not be asked' }]);
  const { client } = await p.newClient();
  const call = { type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{}' };
  const cases: Array<[unknown[], string]> = [
    [[{ role: 'user', content: 'x #script:never-altered' }, call, { type: 'function_call_output', call_id: 'call_1' }], 'input[2].output'],
    [[{ role: 'user', content: 'x #script:never-altered' }, call, { type: 'function_call_output', call_id: 'call_1', output: null }], 'input[2].output'],
    [
      [
        { role: 'user', content: 'x #script:never-altered' },
        { role: 'assistant', content: [{ type: 'output_text', text: 'see' }, { type: 'input_image', image_url: 'https://example.com/a.png' }] },
        { role: 'user', content: 'and?' },
      ],
      'input[1].content[1].type',
    ],
  ];
  for (const [input, param] of cases) {
    const error = await t.throwsAsync(client.responses.create({ model: MODEL, input: input as any, tools: [] }), { instanceOf: BadRequestError }, param);
    t.is((error as BadRequestError).param, param);
  }
  t.is(p.fake.scriptRequests('never-altered').length, 0);
  // An empty output stays a valid (empty) result.
  p.fake.script('empty-output', [{ content: 'fine' }]);
  const ok = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'x #script:empty-output' }, call, { type: 'function_call_output', call_id: 'call_1', output: '' }] as any, tools: [] });
  t.is(ok.status, 'completed');
});

test('responses.inputTokens.count() and responses.compact() are a 404 naming the path as unsupported, not a 405', async (t) => {
  const { client } = await p.newClient();
  const count = await t.throwsAsync(client.responses.inputTokens.count({ model: MODEL, input: 'how many?' }), { instanceOf: NotFoundError });
  t.like((count as NotFoundError).error, { code: 'unsupported_endpoint' });
  t.regex((count as NotFoundError).message, /POST \/v1\/responses\/input_tokens is not supported/);
  const compact = await t.throwsAsync(client.responses.compact({ model: MODEL, input: 'shorter please' } as any), { instanceOf: NotFoundError });
  t.regex((compact as NotFoundError).message, /POST \/v1\/responses\/compact is not supported/);
});

test("an mcp tool's allowed_tools as the SDK's filter ({tool_names, read_only}) narrows the platform tools offered; an unknown name is a 400", async (t) => {
  const { client } = await p.newClient();
  const offered = async (allowed_tools: OpenAI.Responses.Tool.Mcp['allowed_tools'], name: string) => {
    p.fake.script(name, [{ content: 'ok' }]);
    const response = await client.responses.create({ model: MODEL, input: `x #script:${name}`, tools: [{ type: 'mcp', server_label: 'jan', allowed_tools }] });
    t.deepEqual(response.tools[0], { type: 'mcp', server_label: 'jan', allowed_tools });
    return (p.fake.scriptRequests(name)[0]!.body.tools ?? []).map((tool: any) => tool.function.name).sort();
  };
  t.deepEqual(await offered({ tool_names: ['python_exec', 'scrape'] }, 'filter-names'), ['python_exec', 'scrape']);
  // file_search_index writes an index; every other platform tool is annotated read-only.
  t.deepEqual(await offered({ tool_names: ['python_exec', 'file_search_index'], read_only: true }, 'filter-both'), ['python_exec']);
  t.deepEqual(await offered({ read_only: false }, 'filter-writes'), ['file_search_index']);
  // A filter that names nothing keeps every platform tool, as no allowed_tools does.
  t.deepEqual(await offered({}, 'filter-empty'), await offered(null, 'filter-none'));
  const unknown = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: { tool_names: ['no_such_tool'] } }] }), { instanceOf: BadRequestError });
  t.is((unknown as BadRequestError).param, 'tools[0]');
  const bad = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: { tool_names: 'python_exec' } as any }] }), { instanceOf: BadRequestError });
  t.regex((bad as BadRequestError).param ?? '', /^tools\[0\]\.allowed_tools/);
});
