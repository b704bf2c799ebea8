import test from 'ava';
import { ApiError, loadConfig, ManualClock } from '../../services/kit/index.js';
import { responsesConfigShape } from '../../services/response-api/config.js';
import { longestLoopMs } from '../../services/response-api/responses/loop.js';
import type { ChatCompletion, LlmPort, ToolSession } from '../../services/response-api/responses/ports.js';
import { INTERRUPTED_ERROR, startRetentionPurge } from '../../services/response-api/responses/purge.js';
import type { StreamEvent } from '../../services/response-api/responses/recorder.js';
import { cancelResponse, createResponse, getResponse, type ResponsesDeps } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import type { ResponseStore } from '../../services/response-api/responses/store.js';
import { checkStream, domainSuite, fakeLlm, MODEL, principalOf, responsesDomainDeps, type ResponsesPlatform } from './harness.js';

// How a response ends when something other than the model ends it: a cancel (of a response whose
// process is gone, of one that finished), the sweep, a read past the longest a loop runs, the step
// limit reached with tool calls pending; and the cap on one user's background responses.
let p: ResponsesPlatform;
let store: ResponseStore;

domainSuite(
  test,
  (platform, responses) => {
    p = platform;
    store = responses;
  },
  { RESPONSES_MAX_BACKGROUND_PER_USER: '1' },
);

let users = 0;
const newUserId = () => `user_ending_${process.pid}_${++users}`;
const live = () => new AbortController().signal;
const request = (fields: Record<string, unknown> = {}) => ({ model: 'm', input: 'hello', tools: [], ...fields }) as CreateResponseRequest;
const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
const answer = (content: string): ChatCompletion => ({ choices: [{ message: { content }, finish_reason: 'stop' }], usage });
/** A step that answers only when its signal aborts (a cancel), with the signal's reason. */
const never = (_body: unknown, signal: AbortSignal) => new Promise<ChatCompletion>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));


const domainDeps = (llm: LlmPort, overrides: Partial<ResponsesDeps> = {}) => responsesDomainDeps(p, store, llm, overrides);

// --- A response ended without its loop ---------------------------------------------------------

/**
 * A background row as a loop writes it mid-step: one call answered, one still running, a message
 * half written; its context is what the loop started from (a running row keeps no other).
 */
const insertMidStep = (userId: string, id: string, createdAt: number) =>
  store.insert({
    id,
    user_id: userId,
    status: 'in_progress',
    background: true,
    cancel_requested: false,
    body: {
      id,
      object: 'response',
      status: 'in_progress',
      error: null,
      output: [
        { id: 'mcp_done', type: 'mcp_call', server_label: 'jan', name: 'python_exec', arguments: '{"code":"print(4)"}', status: 'completed', output: '4', error: null },
        { id: 'mcp_running', type: 'mcp_call', server_label: 'jan', name: 'web_search', arguments: '{"q":"x"}', status: 'in_progress', output: null, error: null },
        { id: 'msg_half', type: 'message', role: 'assistant', status: 'in_progress', content: [{ type: 'output_text', text: 'So far', annotations: [] }] },
      ],
    },
    context: [{ role: 'user', content: 'compute' }],
    input_items: [],
    created_at: new Date(createdAt),
    expires_at: new Date(createdAt + 30 * 86_400_000),
  });

test('a response ended by a cancel no loop answers, the sweep, or a read past the longest loop: no item stays in_progress, and a chain continues from its output', async (t) => {
  const clock = new ManualClock(Date.now());
  const { llm } = fakeLlm([() => answer('unused')]);
  const deps = domainDeps(llm, { clock });
  const stale = longestLoopMs(deps) + 1000;
  const ways: Array<{ name: string; status: string; end: (userId: string, id: string) => Promise<unknown>; createdAt: number }> = [
    { name: 'cancel', status: 'cancelled', createdAt: clock.now(), end: (userId, id) => cancelResponse(deps, principalOf(userId), id, 0) },
    {
      name: 'sweep',
      status: 'failed',
      createdAt: clock.now() - stale,
      end: async () => {
        const sweep = startRetentionPurge({ store, clock, logger: p.runtime.logger, intervalMs: 0, interruptedAfterMs: longestLoopMs(deps) });
        await sweep.run();
        await sweep.stop();
      },
    },
    { name: 'read', status: 'failed', createdAt: clock.now() - stale, end: (userId, id) => getResponse(deps, principalOf(userId), id) },
  ];
  for (const way of ways) {
    const userId = newUserId();
    const id = `resp_ended_${way.name}_${process.pid}`;
    await insertMidStep(userId, id, way.createdAt);
    await way.end(userId, id);

    const row = (await store.find(userId, id))!;
    t.is(row.status, way.status, way.name);
    t.is(row.body.status, way.status, way.name);
    if (way.status === 'failed') t.deepEqual(row.body.error, INTERRUPTED_ERROR, way.name);
    t.deepEqual(
      row.body.output.map((item: any) => [item.id, item.status]),
      [
        ['mcp_done', 'completed'],
        ['mcp_running', 'incomplete'],
        ['msg_half', 'incomplete'],
      ],
      `${way.name}: no item left in_progress`,
    );
    t.is(row.body.output[0].output, '4', `${way.name}: what was produced is kept`);
    t.is(row.body.output[1].error, 'The response ended before this call did', way.name);
    t.is(row.body.output[2].content[0].text, 'So far', way.name);

    const next = fakeLlm([() => answer('continued')]);
    await createResponse(domainDeps(next.llm, { clock }), principalOf(userId), request({ input: 'go on', previous_response_id: id }), { signal: live() });
    const sent = next.asked[0]!.messages;
    t.deepEqual(
      sent.map((m: any) => m.role),
      ['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant', 'user'],
      `${way.name}: the chain continues from the output produced`,
    );
    t.is(sent[1].tool_calls[0].function.name, 'python_exec', way.name);
    t.is(sent[2].content, '4', way.name);
    t.is(sent[3].tool_calls[0].function.name, 'web_search', way.name);
    t.is(sent[4].content, 'Error: The response ended before this call did', way.name);
    t.is(sent[5].content, 'So far', way.name);
  }
});

// --- Cancel of a response that ended -----------------------------------------------------------

test('cancelling a finished foreground response is a 400 in the error shape; a finished background one is answered unchanged', async (t) => {
  const { client, key } = await p.newClient();
  p.fake.script('cancel-finished', [{ content: 'done' }]);
  const finished = await client.responses.create({ model: MODEL, input: 'hi #script:cancel-finished', tools: [] });
  t.is(finished.status, 'completed');
  const refused = await p.api(key, 'POST', `/v1/responses/${finished.id}/cancel`);
  t.is(refused.status, 400);
  for (const field of ['message', 'type', 'param', 'code']) t.true(field in refused.json.error, `error.${field}`);
  t.like(refused.json.error, { type: 'invalid_request_error', param: null });
  t.regex(refused.json.error.message, /Only responses created with background=true can be cancelled/);
  t.is((await client.responses.retrieve(finished.id)).status, 'completed', 'the response is unchanged');

  // A background response that already ended: returned as it is, any number of times.
  const userId = newUserId();
  const { llm } = fakeLlm([() => answer('background answer')]);
  const deps = domainDeps(llm);
  const queued = await createResponse(deps, principalOf(userId), request({ background: true }), { signal: live() });
  await deps.running.get(queued.id)?.done;
  const ended = await getResponse(deps, principalOf(userId), queued.id);
  t.is(ended.status, 'completed');
  t.deepEqual(await cancelResponse(deps, principalOf(userId), queued.id, 0), ended);
  t.deepEqual(await cancelResponse(deps, principalOf(userId), queued.id, 0), ended);
});

// --- The step limit ----------------------------------------------------------------------------

/** A tools session offering python_exec; `ran` holds the code of every call it ran. */
function pythonSession() {
  const ran: string[] = [];
  const session: ToolSession = {
    list: async () => [{ name: 'python_exec', inputSchema: { type: 'object', properties: {} } }],
    call: async (_name, args) => {
      ran.push(String(args.code));
      return { output: 'ran', isError: false };
    },
    close: async () => {},
  };
  return { session, ran };
}

test('max_steps reached with tool calls pending: they are not run, shown incomplete, and the response ends incomplete (max_steps)', async (t) => {
  const userId = newUserId();
  const { session, ran } = pythonSession();
  let step = 0;
  const { llm } = fakeLlm([
    () => ({ choices: [{ message: { content: null, tool_calls: [{ id: `call_${++step}`, function: { name: 'python_exec', arguments: JSON.stringify({ code: `step ${step}` }) } }] }, finish_reason: 'tool_calls' }], usage }),
  ]);
  const deps = domainDeps(llm, { tools: { open: async () => session } });
  const events: StreamEvent[] = [];
  const capped = await createResponse(deps, principalOf(userId), request({ tools: undefined, max_steps: 2 }), { signal: live(), onEvent: (event) => events.push(event) });
  t.deepEqual(ran, ['step 1'], 'only the call a further step reads is run');
  t.is(capped.status, 'incomplete');
  t.deepEqual(capped.incomplete_details, { reason: 'max_steps' });
  t.deepEqual(
    capped.output.map((item) => [item.type, item.status]),
    [
      ['mcp_call', 'completed'],
      ['mcp_call', 'incomplete'],
    ],
  );
  t.like(capped.output[1], { arguments: '{"code":"step 2"}', output: null, error: 'max_steps (2) reached: this call was not run.' });
  checkStream(t as any, events);
  t.false(events.some((e) => e.type === 'response.mcp_call.in_progress' && e.output_index === 1), 'the call never shows as running');

  // A chain from it is accepted (every call has its output) and tells the model the call was not run.
  const next = fakeLlm([() => answer('continued')]);
  await createResponse(domainDeps(next.llm), principalOf(userId), request({ input: 'go on', previous_response_id: capped.id }), { signal: live() });
  const sent = next.asked[0]!.messages;
  t.deepEqual(
    sent.map((m: any) => m.role),
    ['user', 'assistant', 'tool', 'assistant', 'tool', 'user'],
  );
  t.is(sent[4].content, 'Error: max_steps (2) reached: this call was not run.');
});

test('a last step that also calls a client function runs its platform calls: the conversation goes on', async (t) => {
  const { session, ran } = pythonSession();
  const { llm } = fakeLlm([
    () => ({
      choices: [
        {
          message: {
            content: null,
            tool_calls: [
              { id: 'call_py', function: { name: 'python_exec', arguments: JSON.stringify({ code: 'last' }) } },
              { id: 'call_fn', function: { name: 'lookup', arguments: '{}' } },
            ],
          },
          finish_reason: 'tool_calls',
        },
      ],
      usage,
    }),
  ]);
  const deps = domainDeps(llm, { tools: { open: async () => session } });
  const tools = [
    { type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] },
    { type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } },
  ];
  const answered = await createResponse(deps, principalOf(newUserId()), request({ tools, max_steps: 1 } as never), { signal: live() });
  t.deepEqual(ran, ['last']);
  t.is(answered.status, 'completed');
  t.deepEqual(
    answered.output.map((item) => [item.type, item.status]),
    [
      ['mcp_call', 'completed'],
      ['function_call', 'completed'],
    ],
  );
});

// --- Background responses per user -------------------------------------------------------------

test('a user past RESPONSES_MAX_BACKGROUND_PER_USER background responses gets a 429 until one ends; concurrent creates never overshoot; stale rows and other users do not count', async (t) => {
  const userId = newUserId();
  const { llm } = fakeLlm([never]);
  const deps = domainDeps(llm, { maxBackgroundPerUser: 2 });
  const create = (user = userId) => createResponse(deps, principalOf(user), request({ background: true }), { signal: live() });
  t.teardown(async () => {
    const loops = [...deps.running.values()];
    for (const loop of loops) loop.abort.abort();
    await Promise.allSettled(loops.map((loop) => loop.done));
  });

  // Five at once from one user: the database decides, so exactly the limit is accepted.
  const results = await Promise.allSettled([1, 2, 3, 4, 5].map(() => create()));
  const accepted = results.filter((r): r is PromiseFulfilledResult<any> => r.status === 'fulfilled');
  t.is(accepted.length, 2);
  for (const result of results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
    const error = result.reason as ApiError;
    t.true(error instanceof ApiError);
    t.is(error.status, 429);
    t.is(error.code, 'too_many_background_responses');
    t.is(error.param, 'background');
    t.is(error.headers['retry-after'], '5');
    t.regex(error.message, /at most 2/);
  }
  t.is((await create(newUserId())).status, 'queued', "another user's background responses are counted apart");
  // Foreground responses are not counted, nor limited.
  const { llm: quick } = fakeLlm([() => answer('now')]);
  t.is((await createResponse(domainDeps(quick, { maxBackgroundPerUser: 2 }), principalOf(userId), request(), { signal: live() })).status, 'completed');

  // A cancel frees a place.
  await cancelResponse(deps, principalOf(userId), accepted[0]!.value.id, 0);
  const third = await create();
  t.is(third.status, 'queued');
  await t.throwsAsync(create(), { instanceOf: ApiError, message: /Too many background responses/ });

  // A row a stopped process left running, older than any loop runs, no longer counts.
  const oldUser = newUserId();
  const createdAt = Date.now() - longestLoopMs(deps) - 60_000;
  for (const n of [1, 2]) {
    await store.insert({ id: `resp_left_${process.pid}_${n}`, user_id: oldUser, status: 'in_progress', background: true, cancel_requested: false, body: { output: [] }, context: [], input_items: [], created_at: new Date(createdAt), expires_at: new Date(createdAt + 86_400_000 * 30) });
  }
  t.is((await create(oldUser)).status, 'queued');
});

test('through the API: a background response past the setting is a 429 with Retry-After in the error shape', async (t) => {
  const { client, key } = await p.newClient();
  p.fake.script('held-background', [{ hold: true }]);
  const first = await client.responses.create({ model: MODEL, input: 'wait #script:held-background', tools: [], background: true });
  t.teardown(() => client.responses.cancel(first.id).then(() => undefined));
  t.is(first.status, 'queued');
  const refused = await fetch(`${p.url}/v1/responses`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'one more #script:held-background', tools: [], background: true }),
  });
  t.is(refused.status, 429);
  t.is(refused.headers.get('retry-after'), '5');
  const body = (await refused.json()) as any;
  t.like(body.error, { type: 'rate_limit_error', code: 'too_many_background_responses', param: 'background' });
  t.regex(body.error.message, /at most 1 may be queued or running/);
});

test('RESPONSES_MAX_BACKGROUND_PER_USER: 16 by default, a whole number from 1 to 10000', (t) => {
  t.is(loadConfig(responsesConfigShape, {}).RESPONSES_MAX_BACKGROUND_PER_USER, 16);
  t.is(loadConfig(responsesConfigShape, { RESPONSES_MAX_BACKGROUND_PER_USER: '3' }).RESPONSES_MAX_BACKGROUND_PER_USER, 3);
  for (const bad of ['0', '10001', '2.5', 'many']) {
    t.throws(() => loadConfig(responsesConfigShape, { RESPONSES_MAX_BACKGROUND_PER_USER: bad }), { message: /RESPONSES_MAX_BACKGROUND_PER_USER/ }, bad);
  }
});
