import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { ApiError, ManualClock, systemClock } from '../../services/kit/index.js';
import { endedRow } from '../../services/response-api/responses/ended.js';
import { longestLoopMs, runLoop, type LoopPlan } from '../../services/response-api/responses/loop.js';
import { createToolsPort, type ChatCompletion, type LlmPort } from '../../services/response-api/responses/ports.js';
import { buildResponsesDeps } from '../../services/response-api/deps.js';
import { INTERRUPTED_ERROR, startRetentionPurge } from '../../services/response-api/responses/purge.js';
import { ResponseRecorder, type ResponseObject, type StreamEvent } from '../../services/response-api/responses/recorder.js';
import { cancelResponse, createResponse, type ResponsesDeps } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import { type ResponseRow, type ResponseStore } from '../../services/response-api/responses/store.js';
import { checkStream, fakeLlm, lastToolOutput, MODEL, responsesDomainDeps, streamResponse, type ResponsesPlatform, domainSuite, principalOf } from './harness.js';

// How a response ends, whatever happens on the way: text no database can store, a store that
// fails, a caller that left before the loop started, a step past its timeout, mcp-tools out of
// reach, a cancel or failure followed by chaining, and a process that crashed with responses
// running. Through the SDK where the platform can produce the case, otherwise by calling the
// domain function with ports that answer as the case needs (and the platform's real database).
let p: ResponsesPlatform;
let store: ResponseStore;

domainSuite(test, (platform, responses) => {
  p = platform;
  store = responses;
}, { RESPONSES_TOOLS_CACHE_MS: '0' });

let users = 0;
const newUserId = () => `user_lifecycle_${process.pid}_${++users}`;
const request = (fields: Record<string, unknown> = {}) => ({ model: 'm', input: 'hello', tools: [], ...fields }) as CreateResponseRequest;
const live = () => new AbortController().signal;

const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
const answer = (content: string): ChatCompletion => ({ choices: [{ message: { content }, finish_reason: 'stop' }], usage });
const toolCall = (name: string, args = '{}'): ChatCompletion => ({ choices: [{ message: { content: null, tool_calls: [{ id: `call_${name}`, function: { name, arguments: args } }] }, finish_reason: 'tool_calls' }], usage });
/** A step that answers only when its signal aborts, with the signal's reason (as the real port does). */
const never = (_body: unknown, signal: AbortSignal) => new Promise<ChatCompletion>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));

/** A background response's row as a running loop writes it (no loop runs it in these tests). */
const insertRunning = (userId: string, id: string, fields: { createdAt: number; status?: string; body?: Record<string, unknown> }) => {
  const status = fields.status ?? 'in_progress';
  return store.insert({
    id,
    user_id: userId,
    status,
    background: true,
    cancel_requested: false,
    body: fields.body ?? { id, status, output: [] },
    context: [],
    input_items: [],
    created_at: new Date(fields.createdAt),
    expires_at: new Date(fields.createdAt + 30 * 86_400_000),
  });
};


const domainDeps = (llm: LlmPort, overrides: Partial<ResponsesDeps> = {}) => responsesDomainDeps(p, store, llm, overrides);

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** A port nothing listens on (a server bound to it, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// --- Text no database can store -------------------------------------------------------------

test('a NUL in a tool output and in the model text: the JSON answer completes, with U+FFFD, and is stored as answered', async (t) => {
  p.fake.script('nul-json', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print("a" + chr(0) + "b")' } }] }, { content: 'x\u0000y' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'nul #script:nul-json' });
  t.is(response.status, 'completed');
  const call = response.output[0] as any;
  t.true(String(call.output).startsWith('a\ufffdb'), JSON.stringify(call.output));
  t.is(response.output_text, 'x\ufffdy');
  // llm-api refuses a NUL in a request: the model was sent the tool's output with U+FFFD in its place.
  t.true(lastToolOutput(p.fake.scriptRequests('nul-json')[1]!.body.messages).startsWith('a\ufffdb'));
  t.deepEqual(await client.responses.retrieve(response.id), response);
});

test('a NUL in a tool output: a streamed response ends with response.completed', async (t) => {
  p.fake.script('nul-stream', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print("a" + chr(0) + "b")' } }] }, { content: 'x\u0000y' }]);
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'nul #script:nul-stream' });
  t.is(events.at(-1).type, 'response.completed');
  t.is(final.output.at(-1).content[0].text, 'x\ufffdy');
  t.is((await client.responses.retrieve(final.id)).status, 'completed');
});

test('a NUL in a tool output: a background response ends completed (its stream and its row)', async (t) => {
  p.fake.script('nul-background', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print("a" + chr(0) + "b")' } }] }, { content: 'done' }]);
  const { client } = await p.newClient();
  const { final } = await streamResponse(t, client, { model: MODEL, input: 'nul #script:nul-background', background: true });
  t.is(final.status, 'completed');
  const stored = await client.responses.retrieve(final.id);
  t.is(stored.status, 'completed');
  t.true(String((stored.output[0] as any).output).startsWith('a\ufffdb'));
});

test('an unpaired surrogate and a NUL in streamed model text: the deltas, the stored response and the conversation items carry U+FFFD', async (t) => {
  p.fake.script('lone-stream', [{ content: 'a\ud800b c\u0000d' }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'lone #script:lone-stream', tools: [], conversation: conversation.id });
  t.is(events.at(-1).type, 'response.completed');
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
  t.is(deltas.join(''), 'a\ufffdb c\ufffdd', 'the client gets the text the response keeps');
  t.is(final.output[0].content[0].text, 'a\ufffdb c\ufffdd');
  t.deepEqual((await client.responses.retrieve(final.id)).output, final.output);
  // llm-api's items API refuses such text: the turn reaches the conversation only when it carries none.
  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  t.deepEqual(
    items.map((item) => item.content?.[0]?.text),
    ['lone #script:lone-stream', 'a\ufffdb c\ufffdd'],
  );
});

test('a streamed piece ending inside a surrogate pair waits for the next; one left unpaired at the end of the step is U+FFFD', async (t) => {
  const userId = newUserId();
  const drained = () => null;
  let handedOver: unknown;
  const llm: LlmPort = {
    async complete(_principal, _body, _signal, onDelta) {
      handedOver = onDelta!.drained;
      for (const piece of ['x\ud83d', '\ude00y', 'z\ud83d']) onDelta!.text(piece);
      return answer('x\ud83d\ude00yz\ud83d');
    },
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  const events: StreamEvent[] = [];
  const response = await createResponse(domainDeps(llm), principalOf(userId), request(), { signal: live(), onEvent: (event) => void events.push(event), drained });
  t.is(handedOver, drained, "the step reads as fast as the caller's connection takes the events");
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta as string);
  t.deepEqual(deltas, ['x', '\ud83d\ude00y', 'z', '\ufffd']);
  t.is(response.output[0]!.content[0].text, 'x\ud83d\ude00yz\ufffd');
  t.is((await store.find(userId, response.id))!.body.output[0].content[0].text, 'x\ud83d\ude00yz\ufffd');
});

test("a client function call's id, name and arguments with text no database stores: U+FFFD in the response and in the conversation's items", async (t) => {
  const userId = newUserId();
  const appended: unknown[][] = [];
  const { llm } = fakeLlm([
    () => ({ choices: [{ message: { content: null, tool_calls: [{ id: 'call_\u0000', function: { name: 'lookup', arguments: '{"q":"a\ud800"}' } }] }, finish_reason: 'tool_calls' }], usage }),
  ]);
  llm.appendConversationItems = async (_principal, _conversation, items) => void appended.push(items);
  const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } }];
  const response = await createResponse(domainDeps(llm), principalOf(userId), request({ tools, conversation: 'conv_unstorable' }), { signal: live(), onEvent: () => {} });
  t.is(response.status, 'completed');
  const call = response.output[0]!;
  t.is(call.call_id, 'call_\ufffd');
  t.is(call.arguments, '{"q":"a\ufffd"}');
  t.is(appended.length, 1);
  t.false(JSON.stringify(appended).includes('\\u0000'), JSON.stringify(appended));
  t.true(JSON.stringify(appended).includes('call_\ufffd'));
});

test('the store writes NUL and unpaired surrogates as U+FFFD, keys included, and keeps text that only reads \\u0000', async (t) => {
  const userId = newUserId();
  const now = new Date();
  const row: ResponseRow = {
    id: `resp_store_${process.pid}`,
    user_id: userId,
    status: 'in_progress', // the save below writes the end of a running response
    background: false,
    cancel_requested: false,
    body: { text: 'a\u0000b', lone: 'x\ud800y\udc00z', pair: '\ud83d\ude00', literal: 'reads \\u0000', ['k\u0000']: 1 },
    context: [{ role: 'tool', content: 'out\u0000put' }],
    input_items: [],
    created_at: now,
    expires_at: new Date(now.getTime() + 86_400_000),
  };
  await store.insert(row);
  await store.save(row.id, { status: 'completed', body: { ...row.body, saved: '\u0000' }, context: row.context });
  const found = (await store.find(userId, row.id))!;
  t.deepEqual(found.body, { text: 'a\ufffdb', lone: 'x\ufffdy\ufffdz', pair: '\ud83d\ude00', literal: 'reads \\u0000', ['k\ufffd']: 1, saved: '\ufffd' });
  t.deepEqual(found.context, [{ role: 'tool', content: 'out\ufffdput' }]);
});

// --- A response always ends stored in a terminal state --------------------------------------

test('a response whose end cannot be stored ends failed: response.failed on a stream, the row failed, never in_progress', async (t) => {
  const failingEnd: ResponseStore = {
    ...store,
    // The end of the response is the only write that carries the context.
    async save(id, patch) {
      if (patch.context) throw new Error('the row is too large');
      return store.save(id, patch);
    },
  };
  const userId = newUserId();
  const streamed = fakeLlm([() => toolCall('no_such_tool'), () => answer('done')]);
  const events: StreamEvent[] = [];
  const response = await createResponse(domainDeps(streamed.llm, { store: failingEnd }), principalOf(userId), request(), { signal: live(), onEvent: (e) => void events.push(e) });
  t.is(response.status, 'failed');
  t.deepEqual(response.error, { code: 'server_error', message: 'The response could not be stored' });
  const final = checkStream(t, events);
  t.is(events.at(-1)!.type, 'response.failed');
  t.is(final.status, 'failed');
  const row = (await store.find(userId, response.id))!;
  t.is(row.status, 'failed');
  t.deepEqual(row.body.output, response.output, 'the output is kept');

  // In the background, with no one listening: the row ends failed as well.
  const running: ResponsesDeps['running'] = new Map();
  const background = fakeLlm([() => answer('done')]);
  const queued = await createResponse(domainDeps(background.llm, { store: failingEnd, running }), principalOf(userId), request({ background: true }), { signal: live() });
  t.is(queued.status, 'queued');
  await running.get(queued.id)!.done;
  t.is((await store.find(userId, queued.id))!.status, 'failed');
});

test('a foreground JSON response that cannot be stored is a 503 with the database unavailable, else a 500 (no raw database error)', async (t) => {
  const refusing = (error: Error): ResponseStore => ({
    ...store,
    insert: async () => {
      throw error;
    },
  });
  const { llm } = fakeLlm([() => answer('done')]);
  const down = await t.throwsAsync(
    createResponse(domainDeps(llm, { store: refusing(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })) }), principalOf(newUserId()), request(), { signal: live() }),
    { instanceOf: ApiError },
  );
  t.is(down!.status, 503);
  const refused = await t.throwsAsync(createResponse(domainDeps(llm, { store: refusing(new Error('unsupported Unicode escape sequence')) }), principalOf(newUserId()), request(), { signal: live() }), { instanceOf: ApiError });
  t.is(refused!.status, 500);
  t.is(refused!.message, 'The response could not be stored');
});

test('the sweep ends responses left queued or running longer than any loop runs, by the clock; younger and finished ones stay', async (t) => {
  const clock = new ManualClock(Date.now());
  const bound = longestLoopMs({ stepTimeoutMs: 300_000, toolTimeoutMs: 60_000 });
  t.is(bound, 64 * 60_000, 'about an hour with the default timeouts');
  const userId = newUserId();
  const insert = (id: string, status: string) =>
    insertRunning(userId, id, { createdAt: clock.now(), status, body: { id, object: 'response', status, output: [{ type: 'message', content: [] }], error: null } });
  const id = (name: string) => `resp_sweep_${process.pid}_${name}`;
  await insert(id('running'), 'in_progress');
  await insert(id('queued'), 'queued');
  await insert(id('done'), 'completed');
  clock.advance(bound - 1000);
  await insert(id('young'), 'in_progress');
  const sweep = startRetentionPurge({ store, clock, logger: p.runtime.logger, intervalMs: 0, interruptedAfterMs: bound });
  t.teardown(() => sweep.stop());

  await sweep.run();
  t.is((await store.find(userId, id('running')))!.status, 'in_progress', 'not before the bound');
  clock.advance(1001);
  await sweep.run();
  for (const name of ['running', 'queued']) {
    const row = (await store.find(userId, id(name)))!;
    t.is(row.status, 'failed', name);
    t.like(row.body, { status: 'failed', error: INTERRUPTED_ERROR }, name);
    t.is(row.body.output.length, 1, 'the rest of the body is kept');
  }
  t.is((await store.find(userId, id('done')))!.status, 'completed');
  t.is((await store.find(userId, id('young')))!.status, 'in_progress');
});

test('the sweep also runs when the periodic purge starts (a restarted process ends what a crash left)', async (t) => {
  const clock = new ManualClock(Date.now());
  const userId = newUserId();
  const rowId = `resp_sweep_start_${process.pid}`;
  await insertRunning(userId, rowId, { createdAt: clock.now() - 2 * 3_600_000 });
  const knex = p.runtime.db.knex;
  const swept = new Promise<void>((resolve) => {
    const onResponse = (_rows: unknown, query: { method?: string; sql: string; bindings?: unknown[] }) => {
      if (query.method === 'update' && query.sql.includes('"responses"') && query.bindings?.includes('failed')) {
        knex.off('query-response', onResponse);
        resolve();
      }
    };
    knex.on('query-response', onResponse);
  });
  const periodic = startRetentionPurge({ store, clock, logger: p.runtime.logger, intervalMs: 3_600_000, interruptedAfterMs: 3_600_000 });
  t.teardown(() => periodic.stop());
  await swept;
  t.is((await store.find(userId, rowId))!.status, 'failed');
});

test('a cancel no loop answers (the process running it stopped) ends the row cancelled with its output; a loop that wakes later cannot overwrite it', async (t) => {
  const userId = newUserId();
  const rowId = `resp_orphan_cancel_${process.pid}`;
  const now = Date.now();
  const output = [{ type: 'mcp_call', id: 'mcp_1', name: 'python_exec', arguments: '{}', output: '4', error: null }];
  await insertRunning(userId, rowId, { createdAt: now, body: { id: rowId, object: 'response', status: 'in_progress', output, error: null } });
  const { llm } = fakeLlm([() => answer('unused')]);
  // No loop runs it anywhere, and no wait: the cancel ends it itself.
  const answered = await cancelResponse(domainDeps(llm), principalOf(userId), rowId, 0);
  t.is(answered.status, 'cancelled');
  t.deepEqual(answered.output, output, 'the output its last write kept');
  const row = (await store.find(userId, rowId))!;
  t.is(row.status, 'cancelled');
  t.true(row.cancel_requested);

  // A loop that was only slow, not gone, writes its end after all: the cancelled row stays, and the write says so.
  t.false(await store.save(rowId, { status: 'completed', body: { id: rowId, object: 'response', status: 'completed', output: [] } }));
  const kept = (await store.find(userId, rowId))!;
  t.is(kept.status, 'cancelled');
  t.deepEqual(kept.body.output, output);
  // Another user's cancel of it is a 404 and changes nothing.
  const foreign = await cancelResponse(domainDeps(llm), principalOf(newUserId()), rowId, 0).catch((error: ApiError) => error);
  t.is((foreign as ApiError).status, 404);
});

test('a row the sweep ended failed is not overwritten by a loop that writes later', async (t) => {
  const clock = new ManualClock(Date.now());
  const userId = newUserId();
  const rowId = `resp_swept_late_${process.pid}`;
  await insertRunning(userId, rowId, { createdAt: clock.now() - 2 * 3_600_000 });
  const sweep = startRetentionPurge({ store, clock, logger: p.runtime.logger, intervalMs: 0, interruptedAfterMs: 3_600_000 });
  t.teardown(() => sweep.stop());
  await sweep.run();
  t.is((await store.find(userId, rowId))!.status, 'failed');
  await store.save(rowId, { status: 'completed', body: { id: rowId, status: 'completed', output: [] } });
  const row = (await store.find(userId, rowId))!;
  t.is(row.status, 'failed');
  t.deepEqual(row.body.error, INTERRUPTED_ERROR);
});

test('a loop that ends completed after a cancel from another process ended its row: the row stays cancelled and the turn is not appended to its conversation', async (t) => {
  const userId = newUserId();
  let id = '';
  const appended: Array<{ conversation: string; items: unknown[] }> = [];
  // The step answers only once the cancel has ended the row, as `cancelResponse` does when no loop
  // answers in time (here the loop polls its flag too seldom to see it): no timing involved.
  const { llm } = fakeLlm([
    async () => {
      t.true(await store.endRunning(userId, id, (row) => endedRow(row, { status: 'cancelled' })), 'the cancel ended the row');
      return answer('too late');
    },
  ]);
  llm.appendConversationItems = async (_principal, conversation, items) => void appended.push({ conversation, items });
  const deps = domainDeps(llm, { cancelPollMs: 3_600_000 });
  const events: StreamEvent[] = [];
  const onEvent = (event: StreamEvent) => {
    events.push(event);
    if (event.type === 'response.created') id = event.response.id;
  };
  const late = await createResponse(deps, principalOf(userId), request({ conversation: 'conv_ended_elsewhere' }), { signal: live(), onEvent });
  const row = (await store.find(userId, late.id))!;
  t.is(row.status, 'cancelled', 'the stored end stands');
  t.is(row.body.status, 'cancelled');
  // The stream ends as the row did, not with the loop's own `completed`: a cancelled response's
  // terminal event (response.incomplete, status cancelled) carrying the stored response.
  t.is(events.at(-1)!.type, 'response.incomplete');
  t.deepEqual(events.at(-1)!.response, row.body);
  t.deepEqual(late, row.body as ResponseObject);
  t.is(events.filter((e) => e.type === 'response.completed').length, 0);
  t.deepEqual(appended, [], 'nothing written to the conversation of a response stored cancelled');

  // The same response, not cancelled meanwhile, writes its turn to the conversation.
  const { llm: normal } = fakeLlm([() => answer('in time')]);
  normal.appendConversationItems = llm.appendConversationItems;
  const completed = await createResponse(domainDeps(normal, { cancelPollMs: 3_600_000 }), principalOf(userId), request({ conversation: 'conv_ended_elsewhere' }), { signal: live(), onEvent: () => {} });
  t.is((await store.find(userId, completed.id))!.status, 'completed');
  t.is(appended.length, 1);
  t.is(appended[0]!.conversation, 'conv_ended_elsewhere');
  t.is(appended[0]!.items.length, 2, 'its input and its answer');
});

test('a graceful stop ends the responses its loops run failed, with the error a crash leaves (never cancelled)', async (t) => {
  const stops: Array<() => unknown> = [];
  const ctx = { ...p.ctx, onStop: (cleanup: () => unknown) => void stops.push(cleanup) } as typeof p.ctx;
  let asked = 0;
  let allAsked!: () => void;
  const threeAsked = new Promise<void>((resolve) => (allAsked = resolve));
  const { llm } = fakeLlm([
    (body, signal) => {
      if (++asked === 3) allAsked();
      return never(body, signal);
    },
  ]);
  const { responses } = buildResponsesDeps(ctx, { llm, tools: { open: async () => ({}) as never }, media: { checkReferences: async () => {} } });
  const userId = newUserId();
  const principal = principalOf(userId);
  const queued = await createResponse(responses, principal, request({ background: true }), { signal: live() });
  const events: StreamEvent[] = [];
  const streamed = createResponse(responses, principal, request(), { signal: live(), onEvent: (e) => void events.push(e) });
  const json = createResponse(responses, principal, request(), { signal: live() });
  await threeAsked;
  for (const stop of stops) await stop();

  const background = (await store.find(userId, queued.id))!;
  t.is(background.status, 'failed', 'a polling client sees what a crash leaves, not a cancel');
  t.is(background.body.status, 'failed');
  t.deepEqual(background.body.error, INTERRUPTED_ERROR);
  t.false(background.cancel_requested);

  const ended = await streamed;
  t.is(ended.status, 'failed');
  t.deepEqual(ended.error, INTERRUPTED_ERROR);
  t.is(events.at(-1)!.type, 'response.failed');
  t.is((await store.find(userId, ended.id))!.status, 'failed');

  // A foreground JSON caller whose response had no output yet gets the error itself: a 503 its SDK retries.
  const refused = await t.throwsAsync(json, { instanceOf: ApiError });
  t.is(refused!.status, 503);
  t.is(refused!.message, INTERRUPTED_ERROR.message);
});

// --- The caller, timeouts, mcp-tools --------------------------------------------------------

test('a caller that left before the loop started: no step is asked, the response is stored cancelled', async (t) => {
  const { llm, asked } = fakeLlm([() => answer('nobody reads this')]);
  const userId = newUserId();
  const json = await createResponse(domainDeps(llm), principalOf(userId), request(), { signal: AbortSignal.abort() });
  t.is(json.status, 'cancelled');
  const events: StreamEvent[] = [];
  const streamed = await createResponse(domainDeps(llm), principalOf(userId), request(), { signal: AbortSignal.abort(), onEvent: (e) => void events.push(e) });
  t.is(streamed.status, 'cancelled');
  t.is(events.at(-1)!.type, 'response.incomplete');
  t.is(asked.length, 0, 'no chat completion was asked');
  t.is((await store.find(userId, json.id))!.status, 'cancelled');
  t.is((await store.find(userId, streamed.id))!.status, 'cancelled');
});

test('a step past RESPONSES_STEP_TIMEOUT_MS is a 504 upstream_timeout for a JSON caller, response.failed on a stream; stored failed', async (t) => {
  const { llm } = fakeLlm([never]);
  const userId = newUserId();
  const deps = domainDeps(llm, { stepTimeoutMs: 100 });
  const error = await t.throwsAsync(createResponse(deps, principalOf(userId), request(), { signal: live() }), { instanceOf: ApiError });
  t.is(error!.status, 504);
  t.is(error!.code, 'upstream_timeout');
  t.is(error!.message, 'The chat completion of step 1 did not finish within 100 ms');
  const [row] = await p.runtime.db.knex('responses').where({ user_id: userId });
  t.is(row.status, 'failed');
  t.is(row.body.error.message, error!.message);

  const events: StreamEvent[] = [];
  const streamed = await createResponse(deps, principalOf(userId), request(), { signal: live(), onEvent: (e) => void events.push(e) });
  t.is(streamed.status, 'failed');
  t.is(events.at(-1)!.type, 'response.failed');
  t.is(events.at(-1)!.response.error.message, 'The chat completion of step 1 did not finish within 100 ms');
});

test('mcp-tools out of reach when its tools are listed: 503 service_unavailable (JSON and stream); answering an error: 502', async (t) => {
  const toolsAt = (port: number) => createToolsPort({ baseUrl: () => `http://127.0.0.1:${port}`, gatewayToken: 'unused', clock: systemClock, listCacheMs: 0 });
  const { llm, asked } = fakeLlm([() => answer('never')]);
  const unreachable = domainDeps(llm, { tools: toolsAt(await closedPort()) });
  for (const onEvent of [undefined, () => {}]) {
    const error = await t.throwsAsync(createResponse(unreachable, principalOf(newUserId()), request({ tools: undefined }), { signal: live(), onEvent }), { instanceOf: ApiError });
    t.is(error!.status, 503);
    t.is(error!.code, 'service_unavailable');
    t.is(error!.message, 'The tools service (mcp-tools) is unreachable');
  }

  const failing = createServer((_req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('broken'));
  const port = await listen(failing);
  t.teardown(() => new Promise<void>((resolve) => failing.close(() => resolve())));
  const error = await t.throwsAsync(createResponse(domainDeps(llm, { tools: toolsAt(port) }), principalOf(newUserId()), request({ tools: undefined }), { signal: live() }), { instanceOf: ApiError });
  t.is(error!.status, 502);
  t.is(error!.code, 'upstream_error');
  t.is(asked.length, 0);
});

test('a tool call that cannot reach mcp-tools becomes that call output saying so', async (t) => {
  const principal = principalOf(newUserId());
  const port = await closedPort();
  const session = await createToolsPort({ baseUrl: () => `http://127.0.0.1:${port}`, gatewayToken: 'unused', clock: systemClock, listCacheMs: 0 }).open(principal, live());
  const { llm, asked } = fakeLlm([() => toolCall('python_exec', '{"code":"print(1)"}'), () => answer('done')]);
  const response: ResponseObject = { id: 'resp_unreachable', status: 'in_progress', output: [] };
  const plan: LoopPlan = {
    principal,
    model: 'm',
    instructions: null,
    messages: [{ role: 'user', content: 'run it' }],
    session,
    mcpTools: [{ type: 'function', function: { name: 'python_exec', parameters: { type: 'object' } } }],
    functionTools: [],
    toolChoice: 'auto',
    parallelToolCalls: true,
    maxToolCalls: null,
    maxSteps: 8,
    answerOnLastStep: false,
    maxOutputTokens: null,
    sampling: {},
  };
  await runLoop({ llm, toolTimeoutMs: 5000, stepTimeoutMs: 5000 }, plan, new ResponseRecorder(response), live(), () => false);
  t.like(response.output[0], { type: 'mcp_call', status: 'failed', error: 'The tools service (mcp-tools) is unreachable.' });
  t.is(lastToolOutput(asked[1]!.messages), 'Error: The tools service (mcp-tools) is unreachable.');
  await session.close();
});

// --- Chaining from a response that did not complete -----------------------------------------

test('chaining from a cancelled response continues from what it produced: its tool call and output', async (t) => {
  p.fake.script('cancel-then-chain', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(4242)' } }] }, { hold: true }]);
  const { client } = await p.newClient();
  const stream = await client.responses.create({ model: MODEL, input: 'compute #script:cancel-then-chain', background: true, stream: true });
  const events: any[] = [];
  let cancelled: Promise<unknown> | null = null;
  for await (const event of stream) {
    events.push(event);
    // The tool answered: the loop now asks its next step (which holds) or is about to.
    if (event.type === 'response.mcp_call.completed') cancelled = client.responses.cancel(events[0].response.id);
  }
  await cancelled;
  // A background stream starts as OpenAI's does: created queued, response.queued, then in progress (dense sequence numbers).
  t.deepEqual(events.slice(0, 3).map((e) => [e.type, e.response.status, e.sequence_number]), [['response.created', 'queued', 0], ['response.queued', 'queued', 1], ['response.in_progress', 'in_progress', 2]]);
  const final = checkStream(t, events);
  t.is(final.status, 'cancelled');
  t.true(String(final.output[0].output).includes('4242'));

  p.fake.script('after-cancel', [{ content: 'continued' }]);
  await client.responses.create({ model: MODEL, input: 'go on #script:after-cancel', previous_response_id: final.id, tools: [] });
  const sent = p.fake.scriptRequests('after-cancel')[0]!.body.messages;
  t.deepEqual(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'user'],
  );
  t.is(sent[1].tool_calls[0].function.name, 'python_exec');
  t.true(lastToolOutput(sent).includes('4242'));
});

test('chaining from a failed response continues from its tool calls and outputs too', async (t) => {
  const userId = newUserId();
  const first = fakeLlm([() => toolCall('no_such_tool'), () => Promise.reject(new ApiError(502, 'The provider broke off', { code: 'upstream_error' }))]);
  const failed = await createResponse(domainDeps(first.llm), principalOf(userId), request({ input: 'try' }), { signal: live() });
  t.is(failed.status, 'failed');
  t.is(failed.output.length, 1, 'the tool call made before the failure is the answer');

  const next = fakeLlm([() => answer('continued')]);
  await createResponse(domainDeps(next.llm), principalOf(userId), request({ input: 'again', previous_response_id: failed.id }), { signal: live() });
  const sent = next.asked[0]!.messages;
  t.deepEqual(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'user'],
  );
  t.is(sent[1].tool_calls[0].function.name, 'no_such_tool');
  t.regex(sent[2].content, /^Error: Tool 'no_such_tool' does not exist/);
});
