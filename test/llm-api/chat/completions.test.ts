import { randomUUID } from 'node:crypto';
import test from 'ava';
import OpenAI, { APIError, AuthenticationError, BadRequestError, NotFoundError, PermissionDeniedError, RateLimitError } from 'openai';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { createTestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';

// The official SDK against llm-api directly (identity headers as the edge sets them).
let h: LlmHarness;
let fake: FakeUpstream;
let limited: FakeUpstream;
let reused: FakeUpstream;
let client: OpenAI;
let providerId: string;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'main', models: [{ id: 'chat-model' }, { id: 'think-model', supported_parameters: ['reasoning'] }, { id: 'instruct-model' }, { id: 'think-only', supported_parameters: ['reasoning'] }] });
  limited = await startFakeUpstream({ name: 'limited', models: [{ id: 'limited-model' }] });
  reused = await startFakeUpstream({ name: 'reused', models: [{ id: 'reused-model' }] });
  h = await startLlmHarness({ LLM_SSE_KEEPALIVE_MS: '40' });
  providerId = (await h.call('POST', '/v1/admin/providers', { name: 'Main', vendor: 'fake', base_url: fake.url })).body.id;
  await h.call('POST', '/v1/admin/providers', { name: 'Limited', vendor: 'fake', base_url: limited.url });
  await h.call('POST', '/v1/admin/providers', { name: 'Reused', vendor: 'fake', base_url: reused.url });
  limited.failAll(429, { retryAfter: '1' });
  client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'unused-by-llm-api', maxRetries: 0, defaultHeaders: h.headers(h.user) });
  const pms = (await h.call('GET', `/v1/admin/models/provider-models?provider_id=${providerId}`)).body.data;
  const think = pms.find((m: any) => m.model_public_id === 'think-model');
  await h.call('PATCH', `/v1/admin/models/provider-models/${think.id}`, { instruct_model_public_id: 'instruct-model' });
  const chat = pms.find((m: any) => m.model_public_id === 'chat-model');
  await h.call('PATCH', `/v1/admin/models/provider-models/${chat.id}`, {
    pricing: { lines: [{ amount_micro_usd: 1000, currency: 'USD', unit: 'per_1k_prompt_tokens' }, { amount_micro_usd: 2000, currency: 'USD', unit: 'per_1k_completion_tokens' }] },
  });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
  await limited?.close();
  await reused?.close();
});

const lastBody = (marker: string) => [...fake.requests].reverse().find((r) => JSON.stringify(r.body ?? {}).includes(marker))?.body;

test('models.list through the SDK', async (t) => {
  const ids: string[] = [];
  for await (const m of client.models.list()) ids.push(m.id);
  t.true(ids.includes('chat-model'));
  t.true(ids.includes('limited-model'));
});

test('non-stream completion has the shape the SDK expects; deprecated fields are mapped', async (t) => {
  const { data, response } = await client.chat.completions
    .create({ model: 'chat-model', messages: [{ role: 'user', content: 'hi there map-1' }], max_tokens: 20, functions: undefined })
    .withResponse();
  t.is(data.object, 'chat.completion');
  t.true(Number.isInteger(data.created));
  t.is(data.choices[0]!.message.content, 'Hello from main w1 w2 w3 w4');
  t.is(data.choices[0]!.message.refusal, null);
  t.is(data.choices[0]!.logprobs, null);
  t.is(data.choices[0]!.finish_reason, 'stop');
  t.is(data.usage!.total_tokens, data.usage!.prompt_tokens + data.usage!.completion_tokens);
  t.truthy(response.headers.get('x-request-id'));
  const sent = lastBody('map-1');
  t.is(sent.max_completion_tokens, 20);
  t.false('max_tokens' in sent);
  t.is(sent.model, 'chat-model');

  await client.chat.completions.create({
    model: 'chat-model',
    messages: [{ role: 'user', content: 'map-2' }],
    functions: [{ name: 'lookup', parameters: { type: 'object' } }],
    function_call: { name: 'lookup' },
    metadata: { k: 'v' },
    store: false,
    top_k: 5,
    repetition_penalty: 1.1,
    guided_choice: ['a', 'b'],
  } as any);
  const mapped = lastBody('map-2');
  t.deepEqual(mapped.tools, [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }]);
  t.deepEqual(mapped.tool_choice, { type: 'function', function: { name: 'lookup' } });
  t.false('functions' in mapped);
  t.false('metadata' in mapped);
  t.false('store' in mapped);
  t.is(mapped.top_k, 5);
  t.is(mapped.repetition_penalty, 1.1);
  t.deepEqual(mapped.guided_choice, ['a', 'b']);
});

test('stream: chunks with one id, [DONE] at the end, no usage chunk unless asked; usage still asked upstream', async (t) => {
  const stream = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'stream-1' }], stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  t.true(chunks.length >= 6);
  t.is(new Set(chunks.map((c) => c.id)).size, 1);
  t.is(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), 'Hello from main w1 w2 w3 w4');
  t.false(chunks.some((c) => c.choices.length === 0));
  t.true(lastBody('stream-1').stream_options.include_usage);

  const raw = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'stream-2' }], stream: true }).asResponse();
  t.regex(raw.headers.get('content-type')!, /^text\/event-stream/);
  const text = await raw.text();
  t.true(text.endsWith('data: [DONE]\n\n'));
  t.false(/^event:/m.test(text));
});

test("a stream ends at the provider's [DONE] without waiting for its body to end; the connection is then reused", async (t) => {
  reused.holdStreamEnds(true);
  const stream = await client.chat.completions.create({ model: 'reused-model', messages: [{ role: 'user', content: 'reuse-1' }], stream: true });
  let text = '';
  // The SDK reads until the HTTP body ends, so this loop finishing means our stream has ended.
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  t.is(text, 'Hello from reused w1 w2 w3 w4');
  t.is(reused.releaseStreamEnds(), 1, "the provider's body was still open when the client's stream ended");
  reused.holdStreamEnds(false);
  const opened = reused.connectionsOpened();
  // A round trip through llm-api after the provider's end was written, so its end has been read.
  await client.models.list();
  const again = await client.chat.completions.create({ model: 'reused-model', messages: [{ role: 'user', content: 'reuse-2' }], stream: true });
  for await (const _ of again);
  t.is(reused.chatCount(), 2);
  t.is(reused.connectionsOpened(), opened, "the second stream reused the first one's connection");
});

test('stream with include_usage: the usage chunk (choices: []) comes before [DONE]', async (t) => {
  const stream = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'usage please' }], stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const last = chunks.at(-1)!;
  t.deepEqual(last.choices, []);
  t.is(last.usage!.total_tokens, last.usage!.prompt_tokens + last.usage!.completion_tokens);
  t.true(last.usage!.completion_tokens > 0);
});

test('tool calls: non-stream and streamed deltas assembled by the SDK helper', async (t) => {
  const tools = [
    { type: 'function' as const, function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
    { type: 'function' as const, function: { name: 'fetch', parameters: { type: 'object' } } },
  ];
  const plain = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'tools' }], tools });
  t.is(plain.choices[0]!.finish_reason, 'tool_calls');
  t.deepEqual(plain.choices[0]!.message.tool_calls!.map((c: any) => c.function.name), ['search', 'fetch']);

  const final = await client.chat.completions.stream({ model: 'chat-model', messages: [{ role: 'user', content: 'tools stream' }], tools, stream_options: { include_usage: true } }).finalChatCompletion();
  const calls = final.choices[0]!.message.tool_calls! as any[];
  t.is(calls.length, 2);
  t.is(calls[0].function.name, 'search');
  t.deepEqual(JSON.parse(calls[0].function.arguments), { q: 'x', i: 0 });
  t.deepEqual(JSON.parse(calls[1].function.arguments), { q: 'x', i: 1 });
  t.is(final.choices[0]!.finish_reason, 'tool_calls');
  t.truthy(final.usage);
});

test('n > 1: non-stream and stream', async (t) => {
  const plain = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'n' }], n: 3 });
  t.deepEqual(plain.choices.map((c) => c.index), [0, 1, 2]);
  const final = await client.chat.completions.stream({ model: 'chat-model', messages: [{ role: 'user', content: 'n stream' }], n: 2 }).finalChatCompletion();
  t.is(final.choices.length, 2);
  t.is(final.choices[1]!.message.content, 'Hello from main w1 w2 w3 w4');
});

test('error classes: 401, 403, 404 model_not_found, 400 with param, 429 after failover', async (t) => {
  const anonymous = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'x', maxRetries: 0, defaultHeaders: { 'x-gateway-token': h.service.gatewaySecret } });
  await t.throwsAsync(anonymous.models.list(), { instanceOf: AuthenticationError });
  const forbidden = await t.throwsAsync(client.get('/admin/providers'), { instanceOf: PermissionDeniedError });
  t.is((forbidden as APIError).type, 'permission_error');
  const missing = await t.throwsAsync(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }), { instanceOf: NotFoundError });
  t.is((missing as APIError).code, 'model_not_found');
  // The body field that named the unknown model (as any other bad field is named); a stream request is refused the same way, before any byte.
  t.is((missing as APIError).param, 'model');
  const missingStream = await t.throwsAsync(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }], stream: true }), { instanceOf: NotFoundError });
  t.like((missingStream as APIError).error, { code: 'model_not_found', param: 'model' });
  const bad = await t.throwsAsync(client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), { instanceOf: BadRequestError });
  t.is((bad as APIError).param, 'top_logprobs');
  t.is((bad as APIError).message, "400 The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled.");
  const streamBad = await t.throwsAsync(client.chat.completions.create({ model: 'chat-model', messages: [], stream: true }), { instanceOf: BadRequestError });
  t.is((streamBad as APIError).param, 'messages');
  const limitedErr = await t.throwsAsync(client.chat.completions.create({ model: 'limited-model', messages: [{ role: 'user', content: 'x' }] }), { instanceOf: RateLimitError });
  t.is((limitedErr as APIError).headers?.get('retry-after'), '1');
});

test('validation names the parameter', async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
    [{ model: 'chat-model', messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    [{ model: 'chat-model', messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], top_logprobs: 21, logprobs: true }, 'top_logprobs'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema' } }, 'response_format.json_schema'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { schema: { type: 'object' } } } }, 'response_format.json_schema.name'],
    [{ model: 'chat-model', messages: [{ role: 'assistant', tool_calls: [{ id: 'call_1', type: 'function' }] }, { role: 'user', content: 'x' }] }, 'messages[0].tool_calls[0].function'],
    [{ model: 'chat-model', messages: [{ role: 'assistant', tool_calls: [{ id: 'call_1', type: 'custom', custom: { name: 'grep' } }] }, { role: 'user', content: 'x' }] }, 'messages[0].tool_calls[0].custom.input'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], reasoning_effort: 'extreme' }, 'reasoning_effort'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], verbosity: 'loud' }, 'verbosity'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], service_tier: 'turbo' }, 'service_tier'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], stream_options: { include_usage: true } }, 'stream_options'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], temperature: 3 }, 'temperature'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], n: 0 }, 'n'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], parallel_tool_calls: null }, 'parallel_tool_calls'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], deep_research: true }, 'deep_research'],
    // Deep research runs as a Responses request, whose output cap starts at 16: the field the caller sent is named.
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], deep_research: true, max_completion_tokens: 10 }, 'max_completion_tokens'],
    [{ model: 'chat-model', messages: [{ role: 'user', content: 'x' }], deep_research: true, max_tokens: 15 }, 'max_tokens'],
  ];
  for (const [body, param] of cases) {
    const res = await h.call('POST', '/v1/chat/completions', body, h.user);
    t.is(res.status, 400, param);
    t.is(res.body.error.type, 'invalid_request_error');
    t.is(res.body.error.param, param, JSON.stringify(body));
  }
  const bias = await h.call('POST', '/v1/chat/completions', { model: 'chat-model', messages: [{ role: 'user', content: 'x' }], logit_bias: { hello: 5 } }, h.user);
  t.is(bias.status, 400);
  t.regex(bias.body.error.param, /^logit_bias/);
  t.is((await h.call('POST', '/v1/chat/completions', { model: 'chat-model', messages: [{ role: 'user', content: 'x' }], logit_bias: { '50256': -100 } }, h.user)).status, 200);
});

test("SDK requests the schema used to refuse: top_logprobs up to 20, service_tier 'scale', safety_identifier null, custom tool calls and audio answers in the history; each reaches the provider as sent", async (t) => {
  await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'logprobs-20' }], logprobs: true, top_logprobs: 20, service_tier: 'scale', safety_identifier: null });
  t.like(lastBody('logprobs-20'), { top_logprobs: 20, service_tier: 'scale', safety_identifier: null });
  const history: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'user', content: 'find the TODOs custom-call-1' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_c1', type: 'custom', custom: { name: 'grep', input: 'TODO src/' } }] },
    { role: 'tool', tool_call_id: 'call_c1', content: 'src/a.ts:3 TODO' },
  ];
  const answer = await client.chat.completions.create({ model: 'chat-model', messages: history });
  t.is(answer.object, 'chat.completion');
  t.deepEqual(lastBody('custom-call-1').messages, history);
  // An earlier audio answer replayed by its id (the SDK's `audio: {id}` on an assistant message).
  const audio: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'say it audio-replay' }, { role: 'assistant', audio: { id: 'audio_1' } }, { role: 'user', content: 'again' }];
  await client.chat.completions.create({ model: 'chat-model', messages: audio });
  t.deepEqual(lastBody('audio-replay').messages, audio);
  const format = { type: 'json_schema' as const, json_schema: { name: 'answer', strict: true, schema: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false } } };
  await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'format-named' }], response_format: format });
  t.deepEqual(lastBody('format-named').response_format, format);
});

test('reasoning_effort takes every level the SDK lists and reaches the provider unchanged', async (t) => {
  const levels = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const satisfies ReadonlyArray<NonNullable<OpenAI.ReasoningEffort>>;
  for (const level of levels) {
    const marker = `effort-${level}-${randomUUID()}`;
    await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: marker }], reasoning_effort: level });
    t.is(lastBody(marker)?.reasoning_effort, level);
  }
});

test('enable_thinking=false: allow-lists apply to the instruct model that serves too (403 naming it), and to the model asked for', async (t) => {
  const user = await createTestUser(h.service.runtime.db.knex);
  const own = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'unused-by-llm-api', maxRetries: 0, defaultHeaders: h.headers(user) });
  const allow = async (allowed_models: string[] | null) => t.is((await h.call('PATCH', `/v1/admin/users/${user.id}`, { allowed_models })).status, 200);
  const ask = (model: string) => own.chat.completions.create({ model, messages: [{ role: 'user', content: 'allow-list' }], enable_thinking: false } as any);

  await allow(['think-model']);
  const refused = await t.throwsAsync(ask('think-model'), { instanceOf: PermissionDeniedError });
  t.like((refused as APIError).error, { code: 'model_not_allowed', param: 'model' });
  t.regex((refused as APIError).message, /'instruct-model' \(which serves 'think-model' with enable_thinking: false\) is not allowed/);
  // With thinking on, the model asked for serves, and the list admits it.
  t.is((await own.chat.completions.create({ model: 'think-model', messages: [{ role: 'user', content: 'allow-list' }] })).model, 'think-model');

  // Allowed the instruct model alone: asking for the reasoning model is still asking for a model outside the list.
  await allow(['instruct-model']);
  await t.throwsAsync(ask('think-model'), { instanceOf: PermissionDeniedError, message: /'think-model' is not allowed/ });

  await allow(['think-model', 'instruct-model']);
  t.is((await ask('think-model')).model, 'instruct-model');
});

test('enable_thinking=false: the instruct model serves; without one, the template flag is passed', async (t) => {
  const res = await client.chat.completions.create({ model: 'think-model', messages: [{ role: 'user', content: 'think-1' }], enable_thinking: false } as any);
  t.is(res.model, 'instruct-model');
  t.is(lastBody('think-1').model, 'instruct-model');
  t.false('enable_thinking' in lastBody('think-1'));
  await client.chat.completions.create({ model: 'think-model', messages: [{ role: 'user', content: 'think-2' }] });
  t.is(lastBody('think-2').model, 'think-model');
  await client.chat.completions.create({ model: 'think-only', messages: [{ role: 'user', content: 'think-3' }], enable_thinking: false } as any);
  t.deepEqual(lastBody('think-3').chat_template_kwargs, { enable_thinking: false });
  t.is(lastBody('think-3').model, 'think-only');
});

test('an upstream failure mid-stream → one error event, no [DONE]; the SDK throws APIError without status', async (t) => {
  const raw = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'cut #midstream:2' }], stream: true }).asResponse();
  const text = await raw.text();
  t.false(text.includes('[DONE]'));
  const events = text.split('\n\n').filter(Boolean);
  const last = JSON.parse(events.at(-1)!.slice(6));
  t.like(last.error, { type: 'internal_error', code: 'upstream_error' });
  t.is(events.filter((e) => e.includes('"error"')).length, 1);

  const stream = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'cut #midstream:2' }], stream: true });
  const error = await t.throwsAsync(async () => {
    for await (const _ of stream) void _;
  });
  t.true(error instanceof APIError);
  t.is((error as APIError).status, undefined);

  const evt = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'x #errorevent:1' }], stream: true }).asResponse();
  const evtText = await evt.text();
  t.false(evtText.includes('[DONE]'));
  // The provider's own error event is not relayed verbatim (its text may quote secrets): ours, typed by status.
  const evtLast = JSON.parse(evtText.split('\n\n').filter(Boolean).at(-1)!.slice(6));
  t.like(evtLast.error, { type: 'internal_error', code: 'upstream_error' });
  t.false(evtText.includes('broke'));
});

test('a client that disconnects aborts the upstream request', async (t) => {
  // Other tests cut streams on the same fake at the same time: count only this request's abort.
  const marker = `disconnect-${randomUUID()}`;
  const controller = new AbortController();
  const stream = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: `hold on #hold ${marker}` }], stream: true }, { signal: controller.signal });
  let got = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content === 'held') {
        got++;
        controller.abort();
      }
    }
  } catch {
    // the SDK may end the iteration with an abort error or quietly
  }
  t.is(got, 1);
  await fake.abortedFor(marker);
  t.is(fake.abortsOf(marker), 1);
});

test('keep-alive comments while the upstream is quiet; the SDK ignores them', async (t) => {
  const raw = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'slowly #slow:150 #words:2' }], stream: true }).asResponse();
  const text = await raw.text();
  t.true(text.includes(': keep-alive\n\n'));
  const stream = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'slowly #slow:150 #words:2' }], stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
  t.is(content, 'Hello from main w1');
});

test('usage is recorded off the request path for every request, with cost from pricing', async (t) => {
  const marker = `acct-${Date.now()}`;
  const res = await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: marker }], metadata: { marker } } as any);
  const stream = (await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: marker }], stream: true, metadata: { marker } } as any)) as unknown as AsyncIterable<unknown>;
  for await (const _ of stream) void _;
  const knex = h.service.runtime.db.knex;
  const rows: any[] = await waitFor(async () => {
    const found = await knex('llm_usage').whereRaw("metadata->>'marker' = ?", [marker]).orderBy('id');
    return found.length >= 2 && found;
  }, 30_000, 'two usage rows from the batch writer');
  t.is(rows.length, 2);
  const [plain, streamed] = rows;
  t.like(plain, { user_id: h.user.id, model: 'chat-model', provider_id: providerId, status: 200, outcome: 'ok', stream: false });
  t.is(plain.prompt_tokens, res.usage!.prompt_tokens);
  t.is(plain.completion_tokens, res.usage!.completion_tokens);
  t.is(Number(plain.cost_micro_usd), Math.round(plain.prompt_tokens * 1 + plain.completion_tokens * 2));
  t.like(streamed, { stream: true, outcome: 'ok', status: 200 });
  t.true(streamed.completion_tokens > 0);
});

test("the provider's request carries its key as a Bearer token (none for a provider without a key) and the request id", async (t) => {
  const keyed = await startFakeUpstream({ name: 'keyed', models: [{ id: 'keyed-model' }], apiKey: 'sk-provider-key-for-headers' });
  t.teardown(() => keyed.close());
  await h.call('POST', '/v1/admin/providers', { name: 'Keyed', vendor: 'fake', base_url: keyed.url, api_key: 'sk-provider-key-for-headers' });
  await waitFor(async () => (await h.call('GET', '/v1/models')).body.data.some((m: { id: string }) => m.id === 'keyed-model'));

  const { response } = await client.chat.completions.create({ model: 'keyed-model', messages: [{ role: 'user', content: 'headers-keyed' }] }, { headers: { 'x-request-id': 'req_headers_keyed' } }).withResponse();
  t.is(response.status, 200);
  const sentKeyed = keyed.requests.find((r) => JSON.stringify(r.body ?? {}).includes('headers-keyed'))!;
  t.is(sentKeyed.headers.authorization, 'Bearer sk-provider-key-for-headers');
  t.is(sentKeyed.headers['x-request-id'], response.headers.get('x-request-id')!);
  t.is(sentKeyed.headers['content-type'], 'application/json');

  await client.chat.completions.create({ model: 'chat-model', messages: [{ role: 'user', content: 'headers-keyless' }] });
  const sentKeyless = [...fake.requests].reverse().find((r) => JSON.stringify(r.body ?? {}).includes('headers-keyless'))!;
  t.false('authorization' in sentKeyless.headers);
  t.truthy(sentKeyless.headers['x-request-id']);
});
