import test from 'ava';
import { appendItems, openHistory } from '../../../services/llm-api/conversations/index.js';
import { HISTORY_PAGE_FIRST } from '../../../services/llm-api/conversations/items.js';
import type { TestService } from '../../helpers/env.js';
import { edgeHeaders } from '../../helpers/users.js';
import { assertBadRequest, eventsOf, startWithTwoUsers, text, type Client } from './client.js';

let svc: TestService;
let alice: Client;
let bob: Client;

test.before(async () => {
  ({ svc, alice, bob } = await startWithTwoUsers());
});
test.after.always(() => svc?.close());

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const newConversation = async (c: Client = alice) => (await c.post('/v1/conversations')).body.id as string;

test('create items answers the item list shape with msg_ ids, ISO timestamps and per-branch sequence numbers', async (t) => {
  const id = await newConversation();
  const r = await alice.post(`/v1/conversations/${id}/items`, { items: [text('a'), { role: 'assistant', content: 'b' }] });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.deepEqual(Object.keys(r.body).sort(), ['data', 'first_id', 'has_more', 'last_id', 'object']);
  t.is(r.body.object, 'list');
  t.false(r.body.has_more);
  t.is(r.body.data.length, 2);
  t.is(r.body.first_id, r.body.data[0].id);
  t.is(r.body.last_id, r.body.data[1].id);
  for (const item of r.body.data) {
    t.regex(item.id, /^msg_[0-9A-Za-z]{24}$/);
    t.is(item.object, 'conversation.item');
    t.is(item.type, 'message');
    t.is(item.status, 'completed');
    t.is(item.branch, 'MAIN');
    t.regex(item.created_at, ISO);
  }
  t.deepEqual(r.body.data.map((i: any) => i.sequence_number), [1, 2]);
  t.deepEqual(r.body.data[1].content, [{ type: 'output_text', text: 'b', annotations: [] }], 'an easy message without type is a message');
  const more = await alice.post(`/v1/conversations/${id}/items`, { items: [text('c')] });
  t.is(more.body.data[0].sequence_number, 3);
});

test('items validation: count 1..20, valid type and content, each error naming the index', async (t) => {
  const id = await newConversation();
  const url = `/v1/conversations/${id}/items`;
  assertBadRequest(t, await alice.post(url, {}), 'items');
  assertBadRequest(t, await alice.post(url, { items: [text('x')], extra: 1 }), 'extra');
  assertBadRequest(t, await alice.post(url, { items: [] }), 'items');
  assertBadRequest(t, await alice.post(url, { items: 'hello' }), 'items');
  assertBadRequest(t, await alice.post(url, { items: Array.from({ length: 21 }, () => text('x')) }), 'items');
  t.is((await alice.post(url, { items: Array.from({ length: 20 }, () => text('x')) })).status, 200);
  assertBadRequest(t, await alice.post(url, { items: [text('ok'), 'nope'] }), 'items[1]');
  assertBadRequest(t, await alice.post(url, { items: [{ content: 'no type, no role' }] }), 'items[0].type');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'spaceship', content: 'x' }] }), 'items[0].type');
  assertBadRequest(t, await alice.post(url, { items: [text('ok'), { type: 'message', role: 'user', content: [] }] }), 'items[1].content');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: 42 }] }), 'items[0].content');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', content: 'x' }] }), 'items[0].role');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: [{ type: 'input_text' }] }] }), 'items[0].content[0].text');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: [{}] }] }), 'items[0].content[0]');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: [{ image: { url: 5 } }] }] }), 'items[0].content[0].image.url');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'x', logprobs: [{ token: 1 }] }] }] }), 'items[0].content[0].logprobs[0].token');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'tool_call' }] }), 'items[0].content');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'function_call_output', call_id: 'c1' }] }), 'items[0].output');
  // Types without a rule of their own still need content: a field besides their type and status.
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'reasoning' }] }), 'items[0].content');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'mcp_call', status: 'completed', id: 'mcp_1' }] }), 'items[0].content');
  assertBadRequest(t, await alice.post(url, { items: [text('ok'), { type: 'web_search_call', status: 'completed' }] }), 'items[1].content');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: 'x', max_output_length: 1.5 }] }), 'items[0].max_output_length');
  assertBadRequest(t, await alice.post(url, { items: [{ type: 'message', role: 'user', content: 'x', approve: 'yes' }] }), 'items[0].approve');
  // Nothing of the failed requests was stored: only the 20 good items.
  t.is((await alice.get(`${url}?limit=100`)).body.data.length, 20);
  t.is((await alice.post(url, { items: [{ type: 'reasoning', summary: [] }, { type: 'mcp_call', name: 'web_search', arguments: '{}' }] })).status, 200);
});

test("the internal turn route appends more than 20 items in one request, validated as the public route's, for service calls only", async (t) => {
  const id = await newConversation();
  const internal = async (body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${svc.url}/internal/conversations/${id}/items`, {
      method: 'POST',
      headers: { 'x-gateway-token': svc.gatewaySecret, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const turn = (n: number, from = 0) => Array.from({ length: n }, (_, i) => text(`t${from + i}`));
  // The public route keeps its limit.
  assertBadRequest(t, await alice.post(`/v1/conversations/${id}/items`, { items: turn(21) }), 'items');

  const whole = await internal({ user_id: alice.user.id, items: turn(45) });
  t.is(whole.status, 200, JSON.stringify(whole.body));
  const listed = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100`)).body.data;
  t.deepEqual(
    listed.map((item: any) => item.content[0].text),
    turn(45).map((item) => item.content[0].text),
  );
  t.deepEqual(
    listed.map((item: any) => item.sequence_number),
    Array.from({ length: 45 }, (_, i) => i + 1),
  );
  t.is((await eventsOf(svc.runtime.db.knex, 'message.sent', id)).length, 45, 'message.sent for each item, as on the public route');
  // The answer names what was written without echoing the turn back (up to 2000 items).
  t.deepEqual(whole.body, { object: 'conversation.items.appended', count: 45, first_id: listed[0].id, last_id: listed[44].id });
  // The public route still answers with the created items.
  const publicAnswer = await alice.post(`/v1/conversations/${id}/items`, { items: turn(2, 45) });
  t.is(publicAnswer.body.object, 'list');
  t.deepEqual(publicAnswer.body.data.map((item: any) => item.sequence_number), [46, 47]);
  t.is(publicAnswer.body.last_id, publicAnswer.body.data[1].id);

  // A refused item past the 20th refuses the whole turn, named as the public route names it.
  assertBadRequest(t, await internal({ user_id: alice.user.id, items: [...turn(30, 45), { type: 'message', role: 'robot', content: 'x' }, ...turn(5, 75)] }), 'items[30].role');
  assertBadRequest(t, await internal({ user_id: alice.user.id, items: turn(2001) }), 'items');
  assertBadRequest(t, await internal({ user_id: alice.user.id, items: [] }), 'items');
  assertBadRequest(t, await internal({ items: turn(1) }), 'user_id');
  assertBadRequest(t, await internal({ user_id: 'alice', items: turn(1) }), 'user_id');
  assertBadRequest(t, await internal({ user_id: alice.user.id, items: turn(1), extra: 1 }), 'extra');
  // Another user's conversation is not found, as on the public route.
  t.is((await internal({ user_id: bob.user.id, items: turn(1) })).status, 404);
  // Only services reach it: not with the edge's identity headers (a request that came through the
  // edge, or pretends to), not without the gateway token.
  t.is((await internal({ user_id: alice.user.id, items: turn(1) }, edgeHeaders(svc.gatewaySecret, alice.user))).status, 403);
  t.is((await internal({ user_id: alice.user.id, items: turn(1) }, { 'x-gateway-token': 'wrong' })).status, 401);
  t.is((await alice.get(`/v1/conversations/${id}/items?limit=100`)).body.data.length, 47, 'nothing of the refused turns was stored');
});

test("the internal turn route's model and tokens_used reach the turn's message.sent events as a chat turn's: the model on each, the usage on the answer", async (t) => {
  const id = await newConversation();
  const internal = async (body: unknown) => {
    const res = await fetch(`${svc.url}/internal/conversations/${id}/items`, {
      method: 'POST',
      headers: { 'x-gateway-token': svc.gatewaySecret, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const turn = [
    text('question'),
    { role: 'assistant', content: 'an earlier answer, given in the input' },
    text('follow-up'),
    { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
    { type: 'function_call_output', call_id: 'c1', output: '42' },
    { role: 'assistant', content: 'the answer' },
  ];
  // The first three items are the response's input, the rest its output.
  const written = await internal({ user_id: alice.user.id, items: turn, model: 'turn-model', tokens_used: { prompt: 120, completion: 30 }, answer_from: 3 });
  t.is(written.status, 200, JSON.stringify(written.body));
  const ids = (await alice.get(`/v1/conversations/${id}/items?order=asc&limit=100`)).body.data.map((item: any) => item.id);
  t.like(written.body, { count: 6, first_id: ids[0], last_id: ids[5] });
  const sent = await eventsOf(svc.runtime.db.knex, 'message.sent', id);
  t.deepEqual(sent.map((e) => [e.message_id, e.role, e.model, e.tokens_used]), [
    [ids[0], 'user', 'turn-model', null],
    [ids[1], 'assistant', 'turn-model', null],
    [ids[2], 'user', 'turn-model', null],
    [ids[5], 'assistant', 'turn-model', { prompt: 120, completion: 30 }],
  ]);

  // Both are optional (null: the events say null) and checked like any other field of the body.
  t.is((await internal({ user_id: alice.user.id, items: [{ role: 'assistant', content: 'x' }], model: null, tokens_used: null })).status, 200);
  t.deepEqual((await eventsOf(svc.runtime.db.knex, 'message.sent', id)).slice(4).map((e) => [e.model, e.tokens_used]), [[null, null]]);
  const one = { user_id: alice.user.id, items: [text('x')] };
  for (const answerFrom of [-1, 1.5, '1', null, 2, 2001]) assertBadRequest(t, await internal({ ...one, answer_from: answerFrom }), 'answer_from');
  assertBadRequest(t, await internal({ ...one, model: '' }), 'model');
  assertBadRequest(t, await internal({ ...one, model: 42 }), 'model');
  assertBadRequest(t, await internal({ ...one, model: 'm'.repeat(301) }), 'model');
  assertBadRequest(t, await internal({ ...one, tokens_used: 10 }), 'tokens_used');
  assertBadRequest(t, await internal({ ...one, tokens_used: { prompt: 1 } }), 'tokens_used.completion');
  assertBadRequest(t, await internal({ ...one, tokens_used: { prompt: -1, completion: 0 } }), 'tokens_used.prompt');
  assertBadRequest(t, await internal({ ...one, tokens_used: { prompt: 1, completion: 1.5 } }), 'tokens_used.completion');
  assertBadRequest(t, await internal({ ...one, tokens_used: { prompt: 1, completion: 1, total: 2 } }), 'tokens_used.total');
  t.is((await eventsOf(svc.runtime.db.knex, 'message.sent', id)).length, 5, 'nothing of the refused turns was written');
});

test("a turn whose output has no assistant message reports its usage on no event, not on an assistant message of its input", async (t) => {
  const id = await newConversation();
  const internal = async (body: Record<string, unknown>) => {
    const res = await fetch(`${svc.url}/internal/conversations/${id}/items`, {
      method: 'POST',
      headers: { 'x-gateway-token': svc.gatewaySecret, 'content-type': 'application/json' },
      body: JSON.stringify({ user_id: alice.user.id, model: 'turn-model', tokens_used: { prompt: 50, completion: 7 }, ...body }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const input = [text('question'), { role: 'assistant', content: 'an earlier answer, given in the input' }, text('follow-up')];
  // The output is a client function call only: the response ends waiting for its result.
  const ended = await internal({ items: [...input, { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }], answer_from: input.length });
  t.is(ended.status, 200, JSON.stringify(ended.body));
  t.is(ended.body.count, 4);
  const sent = await eventsOf(svc.runtime.db.knex, 'message.sent', id);
  t.deepEqual(sent.map((e) => [e.role, e.model, e.tokens_used]), [
    ['user', 'turn-model', null],
    ['assistant', 'turn-model', null],
    ['user', 'turn-model', null],
  ]);
  // `answer_from` may be the number of items (an empty answer: nothing takes the usage); without it
  // the whole append is the answer.
  t.is((await internal({ items: [{ role: 'assistant', content: 'input only' }], answer_from: 1 })).status, 200);
  t.is((await internal({ items: [{ role: 'assistant', content: 'all answer' }] })).status, 200);
  t.deepEqual((await eventsOf(svc.runtime.db.knex, 'message.sent', id)).slice(3).map((e) => e.tokens_used), [null, { prompt: 50, completion: 7 }]);
});

// Every top-level field of SPEC.md 2.3 and every content-part kind.
const fullItem = {
  type: 'message',
  role: 'assistant',
  status: 'incomplete',
  name: 'helper',
  call_id: 'call_1',
  arguments: '{"q":1}',
  output: 'out',
  error: 'none',
  reason: 'length',
  server_label: 'srv',
  completed_at: '2026-11-22T01:00:00.000Z',
  incomplete_at: '2026-11-22T01:00:01.000Z',
  rated_at: '2026-11-22T01:00:02.000Z',
  acknowledged_safety_checks: [{ reason: 'r1', type: 't1' }],
  pending_safety_checks: [{ reason: 'r2', type: 't2' }],
  action: { kind: 'click', nested: { x: 1 } },
  operation: { op: 'write', path: '/a' },
  approval_request_id: 'apr_1',
  approve: true,
  commands: ['ls', 'pwd'],
  incomplete_details: { error: 'e', reason: 'max_tokens' },
  max_output_length: 4096,
  rating: 'like',
  rating_comment: 'great',
  shell_outputs: [{ type: 'stdout', value: 'hi' }],
  tools: [{ name: 'search', description: 'web', input_schema: { type: 'object', properties: { q: { type: 'string' } } }, annotations: { readOnly: true } }],
  content: [
    { type: 'text', text: 'plain', finish_reason: 'stop' },
    { type: 'refusal', refusal: 'no' },
    { type: 'summary', summary_text: 'sum' },
    { type: 'thinking', thinking: 'hmm' },
    { type: 'tool_result', tool_call_id: 'call_1' },
    { type: 'audio', audio: { id: 'au_1', data: 'AAAA', format: 'wav', transcript: 'hello' } },
    { type: 'input_audio', input_audio: { data: 'BBBB', format: 'mp3', transcript: 'hey' } },
    { type: 'code', code: { code: 'print(1)', error: '', execution_id: 'ex1', language: 'python', output: '1', exit_code: 0, metadata: { ms: 3 } } },
    { type: 'computer_action', computer_action: { action: 'scroll', key: 'k', text: 't', coordinates: { x: 1, y: 2 }, scroll_delta: { x: 0, y: -3 }, metadata: { a: 1 } } },
    { type: 'computer_screenshot', computer_screenshot: { description: 'd', image_data: 'CCCC', image_url: 'https://e/x.png', height: 10, width: 20, timestamp: 1763770000 } },
    { type: 'file', file: { file_id: 'file_1', mime_type: 'text/plain', name: 'a.txt', size: 12 } },
    { type: 'function_call', function_call: { id: 'fc1', name: 'f', arguments: '{}' } },
    { type: 'function_call_output', function_call_output: { call_id: 'fc1', output: 'ok' } },
    { type: 'image', image: { detail: 'high', file_id: 'jan_1', url: 'https://e/i.png' } },
    {
      type: 'output_text',
      output_text: {
        text: 'answer',
        annotations: [
          {
            type: 'url_citation', text: 't', quote: 'q', url: 'https://e', file_id: 'f', filename: 'fn', container_id: 'c',
            index: 1, start_index: 0, end_index: 5, page_number: 2, confidence: 0.5, bounding_box: { x: 1, y: 2, width: 3, height: 4 },
          },
        ],
        logprobs: [{ token: 'ans', logprob: -0.25, bytes: [97, 110, 115], top_logprobs: [{ token: 'ans', logprob: -0.25, bytes: [97] }] }],
      },
    },
    { type: 'tool_calls', tool_calls: [{ id: 'tc1', type: 'function', function: { id: 'fid', name: 'g', arguments: '{"a":1}' } }] },
    { type: 'output_text', text: 'flat', annotations: [], logprobs: [{ token: 'f', logprob: -1, bytes: [102], top_logprobs: [] }] },
    { type: 'input_image', image_url: 'https://e/in.png', detail: 'auto' },
  ],
};

test('the full item model of SPEC.md 2.3 round-trips unchanged (with include for logprobs)', async (t) => {
  const id = await newConversation();
  const created = await alice.post(`/v1/conversations/${id}/items?include[]=message.output_text.logprobs`, {
    items: [{ ...fullItem, id: 'msg_clientchosen', object: 'whatever', branch: 'X', sequence_number: 99, created_at: 'yesterday' }],
  });
  t.is(created.status, 200, JSON.stringify(created.body));
  const item = created.body.data[0];
  const { id: itemId, object, branch, sequence_number, created_at, ...rest } = item;
  t.not(itemId, 'msg_clientchosen', 'ids are assigned by the server');
  t.is(object, 'conversation.item');
  t.is(branch, 'MAIN');
  t.is(sequence_number, 1);
  t.regex(created_at, ISO);
  t.deepEqual(rest, fullItem);
  for (const path of [`/v1/conversations/${id}/items/${itemId}?include=message.output_text.logprobs`, `/v1/conversations/${id}/items/${itemId}?include[]=message.output_text.logprobs`]) {
    const got = await alice.get(path);
    t.deepEqual(got.body, item, path);
  }
  const listed = await alice.get(`/v1/conversations/${id}/items?include[]=message.output_text.logprobs&include[]=reasoning.encrypted_content`);
  t.deepEqual(listed.body.data[0], item);
});

test('include is honoured: logprobs and encrypted reasoning only when asked; unknown values are a 400', async (t) => {
  const id = await newConversation();
  await alice.post(`/v1/conversations/${id}/items`, {
    items: [
      fullItem,
      { type: 'reasoning', summary: [{ type: 'summary_text', text: 'thought' }], encrypted_content: 'opaque' },
    ],
  });
  const plain = await alice.get(`/v1/conversations/${id}/items?order=asc`);
  const msg = plain.body.data[0];
  t.false('logprobs' in msg.content[14].output_text);
  t.deepEqual(msg.content[14].output_text.annotations, fullItem.content[14]!.output_text!.annotations);
  t.false('logprobs' in msg.content[16]);
  t.false('encrypted_content' in plain.body.data[1]);
  const both = await alice.get(`/v1/conversations/${id}/items?order=asc&include=message.output_text.logprobs,reasoning.encrypted_content`);
  t.deepEqual(both.body.data[0].content[14].output_text.logprobs, fullItem.content[14]!.output_text!.logprobs);
  t.is(both.body.data[1].encrypted_content, 'opaque');
  const repeated = await alice.get(`/v1/conversations/${id}/items?order=asc&include=message.output_text.logprobs&include=reasoning.encrypted_content`);
  t.deepEqual(repeated.body.data, both.body.data);
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?include=everything`), 'include');
  assertBadRequest(t, await alice.post(`/v1/conversations/${id}/items?include[]=nope`, { items: [text('x')] }), 'include');
});

test('OpenAI SDK shapes and SPEC shapes are both accepted', async (t) => {
  const id = await newConversation();
  const items = [
    { type: 'message', role: 'user', content: 'Hello!' },
    { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'rules' }, { type: 'input_image', image_url: 'https://e/x.png', detail: 'low' }, { type: 'input_file', file_id: 'file_1' }] },
    { type: 'function_call', call_id: 'call_9', name: 'lookup', arguments: '{"q":"x"}', status: 'completed' },
    { type: 'function_call_output', call_id: 'call_9', output: '{"ok":true}' },
    { type: 'tool_call', role: 'assistant', content: [{ type: 'tool_calls', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }] },
    { type: 'tool_response', role: 'tool', content: [{ type: 'function_call_output', function_call_output: { call_id: 'c', output: 'done' } }] },
    { type: 'mcp_list_tools', server_label: 'srv', tools: [{ name: 't', input_schema: {} }] },
  ];
  const r = await alice.post(`/v1/conversations/${id}/items`, { items });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.deepEqual(r.body.data[0].content, [{ type: 'input_text', text: 'Hello!' }], 'string content becomes an input_text part');
  t.deepEqual(r.body.data.map((i: any) => i.type), items.map((i) => i.type));
  t.is(r.body.data[2].call_id, 'call_9');
  t.is(r.body.data[3].output, '{"ok":true}');
  t.deepEqual(r.body.data[5].content, items[5]!.content);
});

test('pagination: exact has_more and last_id, asc/desc, after cursor, limit bounds', async (t) => {
  const id = await newConversation();
  const ids: string[] = [];
  for (let batch = 0; batch < 3; batch++) {
    const r = await alice.post(`/v1/conversations/${id}/items`, { items: Array.from({ length: batch < 2 ? 20 : 5 }, (_, i) => text(`m${batch}-${i}`)) });
    ids.push(...r.body.data.map((i: any) => i.id));
  }
  t.is(ids.length, 45);
  async function walk(order: 'asc' | 'desc', limit: number) {
    const seen: string[] = [];
    let after: string | undefined;
    let pages = 0;
    for (;;) {
      const r = await alice.get(`/v1/conversations/${id}/items?order=${order}&limit=${limit}${after ? `&after=${after}` : ''}`);
      t.is(r.status, 200);
      pages++;
      seen.push(...r.body.data.map((i: any) => i.id));
      t.is(r.body.last_id, r.body.data.at(-1)?.id ?? null);
      t.is(r.body.first_id, r.body.data[0]?.id ?? null);
      if (!r.body.has_more) break;
      after = r.body.last_id;
    }
    return { seen, pages };
  }
  const asc = await walk('asc', 10);
  t.deepEqual(asc.seen, ids);
  t.is(asc.pages, 5);
  const desc = await walk('desc', 15);
  t.deepEqual(desc.seen, [...ids].reverse());
  t.is(desc.pages, 3, 'exactly 3 pages of 15: has_more is false on the last full page');
  const def = await alice.get(`/v1/conversations/${id}/items`);
  t.is(def.body.data.length, 20, 'default limit 20');
  t.is(def.body.data[0].id, ids[44], 'default order desc');
  t.true(def.body.has_more);
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?limit=0`), 'limit');
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?limit=101`), 'limit');
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?order=sideways`), 'order');
  assertBadRequest(t, await alice.get(`/v1/conversations/${id}/items?after=msg_unknown`), 'after');
  t.is((await alice.get(`/v1/conversations/${id}/items?limit=100`)).body.data.length, 45);
  const empty = await alice.get(`/v1/conversations/${await newConversation()}/items`);
  t.deepEqual(empty.body, { object: 'list', data: [], first_id: null, last_id: null, has_more: false, total_count: 0 });
});

test('get item: 404 for an unknown item, for an item of another conversation, and across users', async (t) => {
  const a = await newConversation();
  const b = await newConversation();
  const item = (await alice.post(`/v1/conversations/${a}/items`, { items: [text('x')] })).body.data[0];
  t.is((await alice.get(`/v1/conversations/${a}/items/${item.id}`)).status, 200);
  t.is((await alice.get(`/v1/conversations/${a}/items/msg_nope`)).status, 404);
  t.is((await alice.get(`/v1/conversations/${b}/items/${item.id}`)).status, 404);
  const bobs = await newConversation(bob);
  t.is((await bob.get(`/v1/conversations/${bobs}/items/${item.id}`)).status, 404);
  t.is((await alice.get(`/v1/conversations/${a}/items/${item.id}?branch=NOPE`)).status, 404);
});

test('items are immutable: there is no route that changes one', async (t) => {
  const id = await newConversation();
  const item = (await alice.post(`/v1/conversations/${id}/items`, { items: [text('original')] })).body.data[0];
  for (const method of ['PATCH', 'PUT']) {
    const r = await alice.call(method, `/v1/conversations/${id}/items/${item.id}`, { content: 'changed' });
    t.is(r.status, 405, method);
    t.regex(r.body.error.message, /allowed: DELETE, GET, HEAD$/, `${method}: no method that changes an item is allowed`);
  }
  const again = await alice.get(`/v1/conversations/${id}/items/${item.id}`);
  t.deepEqual(again.body, item);
});

test('message.sent: exactly one per created user or assistant item, with the SPEC.md 6.1 fields', async (t) => {
  const id = await newConversation();
  const r = await alice.post(`/v1/conversations/${id}/items`, {
    items: [
      { role: 'system', content: 'sys' },
      text('question'),
      { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
      { role: 'assistant', content: 'answer' },
    ],
  });
  const sent = await eventsOf(svc.runtime.db.knex, 'message.sent', id);
  t.is(sent.length, 2);
  t.deepEqual(Object.keys(sent[0]!).sort(), ['content', 'conversation_id', 'message_id', 'model', 'role', 'sent_at', 'tokens_used']);
  t.deepEqual(sent.map((e) => [e.message_id, e.role]), [
    [r.body.data[1].id, 'user'],
    [r.body.data[3].id, 'assistant'],
  ]);
  t.deepEqual(sent[0]!.content, [{ type: 'input_text', text: 'question' }]);
  t.is(sent[0]!.model, null);
  t.is(sent[0]!.tokens_used, null);
  t.regex(sent[0]!.sent_at, ISO);
});

test('appendItems (the domain function chat completions calls) stores to the active branch and reports model and tokens', async (t) => {
  const id = await newConversation();
  const knex = svc.runtime.db.knex;
  const result = await appendItems(knex, {
    conversationId: id,
    userId: alice.user.id,
    items: [text('q'), { role: 'assistant', content: 'a' }],
    model: 'test-model',
    tokensUsed: { prompt: 12, completion: 3 },
  });
  t.is(result.items.length, 2);
  t.is(result.branch, 'MAIN');
  const sent = await eventsOf(knex, 'message.sent', id);
  t.deepEqual(sent.map((e) => [e.role, e.model, e.tokens_used]), [
    ['user', 'test-model', null],
    ['assistant', 'test-model', { prompt: 12, completion: 3 }],
  ]);
  // Inside a caller's transaction: a rollback takes the items and the events with it.
  await t.throwsAsync(
    knex.transaction(async (trx) => {
      await appendItems(trx, { conversationId: id, userId: alice.user.id, items: [text('rolled back')] });
      throw new Error('caller failed');
    }),
    { message: 'caller failed' },
  );
  const history = await openHistory(knex, { conversationId: id, userId: alice.user.id });
  const read: Array<[string | null, number]> = [];
  for await (const item of history.newestFirst()) read.push([item.role, item.position]);
  t.deepEqual(read, result.items.map((i) => [i.role as string, i.sequence_number as number]).reverse());
  t.is((await eventsOf(knex, 'message.sent', id)).length, 2);
  await t.throwsAsync(appendItems(knex, { conversationId: id, userId: bob.user.id, items: [text('x')] }), { message: /not found/ });
  await t.throwsAsync(appendItems(knex, { conversationId: id, userId: alice.user.id, items: [{ type: 'nope' }] }), { message: /items\[0\]\.type/ });
});

test('appendItems reports the usage on the last assistant item from answerFrom on, never on one before it', async (t) => {
  const id = await newConversation();
  const knex = svc.runtime.db.knex;
  const usage = { prompt: 9, completion: 4 };
  const prefill = { role: 'assistant', content: 'prefill' };
  // An input ending in an assistant prefill, answered with tool calls only.
  await appendItems(knex, {
    conversationId: id,
    userId: alice.user.id,
    items: [prefill, { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }],
    tokensUsed: usage,
    answerFrom: 1,
  });
  // An answer with a message of its own after an assistant input: the answer's.
  await appendItems(knex, { conversationId: id, userId: alice.user.id, items: [prefill, { role: 'assistant', content: 'answer' }], tokensUsed: usage, answerFrom: 1 });
  t.deepEqual((await eventsOf(knex, 'message.sent', id)).map((e) => [e.content?.[0]?.text ?? e.content, e.tokens_used]), [
    ['prefill', null],
    ['prefill', null],
    ['answer', usage],
  ]);
});

test('item ids are never reused: every created id is new', async (t) => {
  const id = await newConversation();
  const r = await alice.post(`/v1/conversations/${id}/items`, { items: Array.from({ length: 20 }, () => ({ ...text('same'), id: 'msg_same' })) });
  const ids = new Set(r.body.data.map((i: any) => i.id));
  t.is(ids.size, 20);
  const existing = await svc.runtime.db.knex('conversation_items').whereIn('id', [...ids] as string[]);
  t.is(existing.length, 20);
});

// Serial (AVA runs serial tests before the rest): no other test reads branch pages meanwhile.
test.serial('openHistory reads the branch newest first in growing pages, only as far as asked, unshaken by appends', async (t) => {
  const knex = svc.runtime.db.knex;
  const id = await newConversation();
  const total = HISTORY_PAGE_FIRST * 3 + 5; // three pages: 32, 64, then a short one
  for (let written = 0; written < total; written += 20) {
    const r = await alice.post(`/v1/conversations/${id}/items`, { items: Array.from({ length: Math.min(20, total - written) }, (_, k) => text(`m${written + k}`)) });
    t.is(r.status, 200);
  }
  const textOf = (item: { content: unknown }) => (item.content as Array<{ text: string }>)[0]!.text;
  // Only the page reads are counted: the service's own work (the outbox relay publishing the
  // appends' events) runs queries on the same knex meanwhile.
  let queries = 0;
  const count = (query: { sql?: string }) => {
    if (query.sql?.includes('from "branch_items"')) queries++;
  };
  knex.on('query', count);
  try {
    const history = await openHistory(knex, { conversationId: id, userId: alice.user.id });
    const all: string[] = [];
    const sequence: number[] = [];
    let appended = false;
    for await (const item of history.newestFirst()) {
      all.push(textOf(item));
      sequence.push(item.position);
      if (!appended) {
        // Appended while the first page is being read: above every position read, so never seen.
        await appendItems(knex, { conversationId: id, userId: alice.user.id, items: [text('late')] });
        appended = true;
      }
    }
    t.deepEqual(all, Array.from({ length: total }, (_, i) => `m${total - 1 - i}`), 'every item once, newest first');
    t.deepEqual(sequence, Array.from({ length: total }, (_, i) => total - i));
    await appendItems(knex, { conversationId: id, userId: alice.user.id, items: [text('another')] });

    queries = 0;
    const first: string[] = [];
    for await (const item of history.newestFirst()) {
      first.push(textOf(item));
      if (first.length === 10) break;
    }
    t.deepEqual(first.slice(0, 2), ['another', 'late']);
    t.is(queries, 1, 'stopping within the first page reads no further page');

    queries = 0;
    let n = 0;
    for await (const _ of history.newestFirst()) n++;
    t.is(n, total + 2);
    t.is(queries, 3, 'a conversation of three pages is read in three queries');
  } finally {
    knex.off('query', count);
  }
});
