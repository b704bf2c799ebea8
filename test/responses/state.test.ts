import test from 'ava';
import { NotFoundError } from 'openai';
import { ManualClock } from '../../services/kit/index.js';
import { startRetentionPurge } from '../../services/response-api/responses/purge.js';
import { createResponseStore } from '../../services/response-api/responses/store.js';
import { lastToolOutput, MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// State kept by the platform: conversation items written through llm-api's conversation store
// (the one GET /v1/conversations/{id}/items reads), chaining inside a conversation, and the
// retention purge driven by a manual clock.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform({ RESPONSES_PURGE_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

test('with a conversation, the input, tool items and answer become items of that conversation', async (t) => {
  p.fake.script('conv-1', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(40+2)' } }] }, { content: (m) => `Answer: ${lastToolOutput(m).trim().split('\n')[0]}` }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const response = await client.responses.create({ model: MODEL, input: 'first question #script:conv-1', conversation: conversation.id });
  t.is(response.status, 'completed');
  t.deepEqual(response.conversation, { id: conversation.id });

  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  t.deepEqual(
    items.map((i) => i.type),
    ['message', 'mcp_call', 'message'],
  );
  t.is(items[0].role, 'user');
  t.is(items[0].content[0].text, 'first question #script:conv-1');
  t.true(String(items[1].output).includes('42'));
  t.is(items[2].role, 'assistant');
  t.is(items[2].content[0].text, 'Answer: 42');

  // A second response in the conversation starts from its items; chaining from it stays in it.
  p.fake.script('conv-2', [{ content: (m) => `seen ${m.length}` }]);
  const second = await client.responses.create({ model: MODEL, input: 'second #script:conv-2', conversation: conversation.id, tools: [] });
  const sent = p.fake.scriptRequests('conv-2')[0]!.body.messages;
  t.regex(JSON.stringify(sent[0]), /first question/);
  t.true(sent.some((m: any) => m.role === 'tool' && String(m.content).includes('42')));
  p.fake.script('conv-3', [{ content: 'third' }]);
  const third = await client.responses.create({ model: MODEL, input: 'third #script:conv-3', previous_response_id: second.id, tools: [] });
  t.deepEqual(third.conversation, { id: conversation.id });
  const after: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) after.push(item);
  t.is(after.length, 7);
  t.is(after.at(-1).content[0].text, 'third');
});

test("a turn's message.sent events carry the response's model, and its usage (the sum of its steps) on the answer, as a chat turn's do", async (t) => {
  p.fake.script('conv-usage', [{ tool_calls: [{ name: 'not_a_tool', arguments: {} }] }, { content: 'the answer' }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const response = await client.responses.create({
    model: MODEL,
    input: [
      { type: 'message', role: 'user', content: 'earlier question' },
      { type: 'message', role: 'assistant', content: 'earlier answer' },
      { type: 'message', role: 'user', content: 'question #script:conv-usage' },
    ],
    conversation: conversation.id,
  });
  t.is(response.status, 'completed');
  const steps = (response as any).step_usage as Array<{ input_tokens: number; output_tokens: number }>;
  t.is(steps.length, 2);
  const usage = response.usage!;
  t.is(usage.input_tokens, steps[0]!.input_tokens + steps[1]!.input_tokens);
  t.is(usage.output_tokens, steps[0]!.output_tokens + steps[1]!.output_tokens);
  t.true(usage.input_tokens > 0 && usage.output_tokens > 0);

  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  const sent = (await p.runtime.db.knex('outbox_events').where({ type: 'message.sent' }).whereRaw("data->>'conversation_id' = ?", [conversation.id]).orderBy('seq', 'asc').select('data')).map(
    (row: { data: Record<string, any> }) => row.data,
  );
  const answer = items.at(-1);
  t.is(answer.content[0].text, 'the answer');
  // The earlier answer given in the input is not this turn's: the usage is reported once, on the answer.
  t.deepEqual(sent.map((e) => [e.message_id, e.role, e.model, e.tokens_used]), [
    [items[0].id, 'user', MODEL, null],
    [items[1].id, 'assistant', MODEL, null],
    [items[2].id, 'user', MODEL, null],
    [answer.id, 'assistant', MODEL, { prompt: usage.input_tokens, completion: usage.output_tokens }],
  ]);
});

test('a turn whose output is only a client function_call reports its usage on no message.sent, not on an assistant message of its input', async (t) => {
  p.fake.script('conv-call-only', [{ tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const response = await client.responses.create({
    model: MODEL,
    input: [
      { type: 'message', role: 'user', content: 'earlier question' },
      { type: 'message', role: 'assistant', content: 'earlier answer' },
      { type: 'message', role: 'user', content: 'weather? #script:conv-call-only' },
    ],
    tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }],
    conversation: conversation.id,
  });
  t.is(response.status, 'completed');
  t.deepEqual(response.output.map((item) => item.type), ['function_call']);
  t.true(response.usage!.output_tokens > 0);

  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  t.deepEqual(items.map((item) => item.type), ['message', 'message', 'message', 'function_call']);
  const sent = (await p.runtime.db.knex('outbox_events').where({ type: 'message.sent' }).whereRaw("data->>'conversation_id' = ?", [conversation.id]).orderBy('seq', 'asc').select('data')).map(
    (row: { data: Record<string, any> }) => row.data,
  );
  // The input's assistant message is an earlier turn's answer; this turn's answer has no message.
  t.deepEqual(sent.map((e) => [e.message_id, e.role, e.model, e.tokens_used]), [
    [items[0].id, 'user', MODEL, null],
    [items[1].id, 'assistant', MODEL, null],
    [items[2].id, 'user', MODEL, null],
  ]);
});

test('a turn of more than 20 items becomes items of the conversation whole; the internal route that writes it is not reachable through the edge', async (t) => {
  p.fake.script('long-turn', [{ content: 'answered' }]);
  const { client, key, userId } = await p.newClient();
  const conversation = await client.conversations.create({});
  const texts = Array.from({ length: 30 }, (_, i) => `line ${i}${i === 29 ? ' #script:long-turn' : ''}`);
  // Inserts of conversation items, counted on the platform's database: one per transaction that
  // appends (tests running beside this one write to other conversations, told apart by id).
  let inserts = 0;
  const onQuery = (query: { method: string; sql: string; bindings?: unknown[] }) =>
    void (query.method === 'insert' && query.sql.includes('"conversation_items"') && query.bindings?.includes(conversation.id) && inserts++);
  p.runtime.db.knex.on('query', onQuery);
  let response;
  try {
    response = await client.responses.create({
      model: MODEL,
      input: texts.map((text) => ({ type: 'message', role: 'user', content: text })),
      conversation: conversation.id,
      tools: [],
    });
  } finally {
    p.runtime.db.knex.off('query', onQuery);
  }
  t.is(response.status, 'completed');
  t.is(inserts, 1, 'the turn was written in one transaction');
  const listed = async () => {
    const items: any[] = [];
    for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
    return items.map((item) => item.content[0].text);
  };
  t.deepEqual(await listed(), [...texts, 'answered'], 'all 31 items, in order');

  // A client cannot write a turn itself: the edge routes no spelling of `/internal/`.
  for (const path of [`/internal/conversations/${conversation.id}/items`, `/llm/internal/conversations/${conversation.id}/items`]) {
    const res = await fetch(`${p.url}${path}`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ user_id: userId, items: [{ type: 'message', role: 'user', content: 'smuggled' }] }),
    });
    t.is(res.status, 404, `POST ${path}`);
  }
  t.is((await listed()).length, 31, 'nothing written through the edge');
});

test('a foreground response that does not stream is written once, when it ends; a streamed one as it runs', async (t) => {
  const steps = [{ tool_calls: [{ name: 'not_a_tool', arguments: {} }] }, { tool_calls: [{ name: 'not_a_tool', arguments: {} }] }, { content: 'done' }];
  p.fake.script('writes-whole', steps);
  p.fake.script('writes-streamed', steps);
  // Statements on the responses table, told apart by the response id among their bindings.
  const writes: Array<{ method: string; bindings: unknown[] }> = [];
  const onQuery = (query: { method: string; sql: string; bindings?: unknown[] }) => {
    if (query.sql.includes('"responses"') && (query.method === 'insert' || query.method === 'update')) writes.push({ method: query.method, bindings: query.bindings ?? [] });
  };
  const knex = p.runtime.db.knex;
  knex.on('query', onQuery);
  const { client } = await p.newClient();
  let whole: Awaited<ReturnType<typeof client.responses.create>>;
  let streamedId = '';
  try {
    whole = await client.responses.create({ model: MODEL, input: 'x #script:writes-whole' });
    const stream = await client.responses.create({ model: MODEL, input: 'x #script:writes-streamed', stream: true });
    for await (const event of stream) if (event.type === 'response.completed') streamedId = event.response.id;
  } finally {
    knex.off('query', onQuery);
  }
  const of = (id: string) => writes.filter((w) => w.bindings.includes(id)).map((w) => w.method);
  t.is(whole.status, 'completed');
  t.deepEqual(of(whole.id), ['insert'], 'one insert of the finished response');
  t.deepEqual(of(streamedId), ['insert', ...Array(5).fill('update')], 'written first, as each of the two tool steps starts its calls and ends, and at the end');
  const stored = await client.responses.retrieve(whole.id);
  t.deepEqual(stored, whole);
  const items = await client.responses.inputItems.list(whole.id);
  t.is(items.data.length, 1);
});

test('previous_response_id together with conversation is a 400', async (t) => {
  const { client } = await p.newClient();
  const error: any = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', conversation: 'conv_x', previous_response_id: 'resp_x' }));
  t.is(error.status, 400);
  t.is(error.param, 'conversation');
});

test('store: false keeps nothing', async (t) => {
  p.fake.script('unstored', [{ content: 'gone' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'x #script:unstored', store: false, tools: [] });
  t.is(response.output_text, 'gone');
  await t.throwsAsync(client.responses.retrieve(response.id), { instanceOf: NotFoundError });
});

test('the retention purge removes responses past RESPONSES_RETENTION_DAYS (30 by default), by the clock', async (t) => {
  p.fake.script('kept', [{ content: 'kept for now' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'x #script:kept', tools: [] });
  const clock = new ManualClock(Date.now());
  const purge = startRetentionPurge({ store: createResponseStore(p.runtime.db.knex), clock, logger: p.runtime.logger, intervalMs: 0 });
  t.teardown(() => purge.stop());

  clock.advance(29 * 86_400_000);
  await purge.run();
  t.is((await client.responses.retrieve(response.id)).id, response.id, 'still there after 29 days');
  clock.advance(2 * 86_400_000);
  t.true((await purge.run()) >= 1);
  await t.throwsAsync(client.responses.retrieve(response.id), { instanceOf: NotFoundError });
});
