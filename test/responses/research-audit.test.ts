import test from 'ava';
import { BadRequestError } from 'openai';
import type { Principal } from '../../services/kit/index.js';
import type { LlmPort, ToolSession } from '../../services/response-api/responses/ports.js';
import { createResponse } from '../../services/response-api/responses/responses.js';
import type { CreateResponseRequest } from '../../services/response-api/responses/schemas.js';
import type { ResponseStore } from '../../services/response-api/responses/store.js';
import { waitFor } from '../helpers/wait.js';
import { MODEL, REASONING_MODEL, responsesDomainDeps, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// Bad input to POST /v1/responses that must be refused before anything runs, naming the field the
// caller has to fix; what a response that cannot start leaves behind; and a deep research (an
// unstored response) whose client leaves in the middle of a step.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

async function post(key: string, body: unknown) {
  const res = await fetch(`${p.url}/v1/responses`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
}

test('a tool object is refused naming its own wrong field: server_url, connector_id, tunnel_id, authorization, headers and allowed_tools of an mcp tool, the type of an unknown kind', async (t) => {
  const { key } = await p.newUser();
  const remote = await post(key, { model: MODEL, input: 'x', tools: [{ type: 'mcp', server_label: 'remote', server_url: 'https://mcp.example.com/sse' }] });
  t.is(remote.status, 400);
  t.is(remote.body.error.param, 'tools[0].server_url');
  t.regex(remote.body.error.message, /leave server_url out/);

  // A connector is another server as well; credentials for one reach no server, and would be stored and echoed.
  for (const [field, value] of [
    ['connector_id', 'connector_googledrive'],
    ['tunnel_id', 'tunnel_secret-1234'],
    ['authorization', 'ya29.secret-oauth-token'],
    ['headers', { Authorization: 'Bearer secret' }],
  ] as const) {
    const other = await post(key, { model: MODEL, input: 'x', tools: [{ type: 'mcp', server_label: 'drive', [field]: value }] });
    t.is(other.status, 400, field);
    t.is(other.body.error.param, `tools[0].${field}`);
    t.regex(other.body.error.message, new RegExp(`leave ${field} out`));
    t.false(JSON.stringify(other.body).includes('secret'), 'the refusal does not repeat the credential');
  }
  // Null is taken for each; the echo leaves out the nulls the SDK's Tool.Mcp has no null for, and keeps headers: null.
  p.fake.script('mcp-nulls', [{ content: 'ok' }]);
  const nulls = await post(key, { model: MODEL, input: 'x #script:mcp-nulls', tools: [{ type: 'mcp', server_label: 'jan', connector_id: null, tunnel_id: null, authorization: null, headers: null }] });
  t.is(nulls.status, 200);
  t.deepEqual(nulls.body.tools, [{ type: 'mcp', server_label: 'jan', headers: null }]);
  const kept = await fetch(`${p.url}/v1/responses/${nulls.body.id}`, { headers: { 'x-api-key': key } });
  t.deepEqual(((await kept.json()) as any).tools, [{ type: 'mcp', server_label: 'jan', headers: null }]);
  // An empty header map carries no credential: taken, and echoed as null.
  p.fake.script('mcp-empty-headers', [{ content: 'ok' }]);
  const empty = await post(key, { model: MODEL, input: 'x #script:mcp-empty-headers', tools: [{ type: 'mcp', server_label: 'jan', headers: {} }] });
  t.is(empty.status, 200);
  t.deepEqual(empty.body.tools, [{ type: 'mcp', server_label: 'jan', headers: null }]);

  const filter = await post(key, { model: MODEL, input: 'x', tools: ['python_exec', { type: 'mcp', server_label: 'jan', allowed_tools: 'python_exec' }] });
  t.is(filter.status, 400);
  t.is(filter.body.error.param, 'tools[1].allowed_tools');

  const unknown = await post(key, { model: MODEL, input: 'x', tools: [{ type: 'web_search_preview' }] });
  t.is(unknown.status, 400);
  t.is(unknown.body.error.param, 'tools[0].type');
  t.regex(unknown.body.error.message, /function, mcp/);

  const unnamed = await post(key, { model: MODEL, input: 'x', tools: [{ type: 'function' }] });
  t.is(unnamed.status, 400);
  t.is(unnamed.body.error.param, 'tools[0].name');
});

test('a function_call_output that answers no call is a 400 naming its call_id, before any step (JSON and stream)', async (t) => {
  p.fake.script('orphan-output', [{ content: 'never asked' }]);
  const { client } = await p.newClient();
  const input = [
    { role: 'user' as const, content: 'weather?' },
    { type: 'function_call_output' as const, call_id: 'call_nobody_made', output: 'sunny' },
    { role: 'user' as const, content: 'and now? #script:orphan-output' },
  ];
  const json = await t.throwsAsync(client.responses.create({ model: MODEL, input, tools: [] }), { instanceOf: BadRequestError });
  t.is((json as BadRequestError).param, 'input[1].call_id');
  t.regex(json!.message, /call_nobody_made/);
  const streamed = await t.throwsAsync(client.responses.create({ model: MODEL, input, tools: [], stream: true }), { instanceOf: BadRequestError });
  t.is((streamed as BadRequestError).param, 'input[1].call_id');
  t.is(p.fake.scriptRequests('orphan-output').length, 0, 'nothing went upstream');

  // The same output after its call (in the input, or in the response it continues) is accepted.
  p.fake.script('answered-output', [{ content: 'answered' }]);
  const answered = await client.responses.create({
    model: MODEL,
    tools: [],
    input: [
      { role: 'user', content: 'weather?' },
      { type: 'function_call', call_id: 'call_made', name: 'get_weather', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_made', output: 'sunny' },
      { role: 'user', content: 'and now? #script:answered-output' },
    ],
  });
  t.is(answered.status, 'completed');
  t.is(answered.output_text, 'answered');
});

test('a streamed or background response whose first write fails closes the tool session it opened', async (t) => {
  const principal: Principal = { userId: 'user_audit_insert', subject: 'user_audit_insert', email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false };
  const llm: LlmPort = {
    complete: async () => {
      throw new Error('no step may run');
    },
    appendConversationItems: async () => {},
    conversationHistory: async function* () {},
    contextLength: async () => null,
  };
  const store = {
    insert: async () => {
      throw new Error('the database refused the row');
    },
  } as unknown as ResponseStore;
  for (const mode of [{ stream: true }, { background: true }]) {
    let opened = 0;
    let closed = 0;
    const session: ToolSession = {
      list: async () => [{ name: 'python_exec', inputSchema: { type: 'object', properties: {} } }],
      call: async () => ({ output: '', isError: false }),
      close: async () => void closed++,
    };
    const deps = responsesDomainDeps(p, store, llm, { tools: { open: async () => (opened++, session) } });
    const input = { model: MODEL, input: 'hello', ...mode } as CreateResponseRequest;
    await t.throwsAsync(createResponse(deps, principal, input, { signal: new AbortController().signal, ...(mode.stream ? { onEvent: () => {} } : {}) }), { message: /refused the row/ });
    t.is(opened, 1, `${Object.keys(mode)[0]}: the platform tools were listed`);
    t.is(closed, 1, `${Object.keys(mode)[0]}: the session is closed`);
    t.is(deps.running.size, 0, 'no loop was left running');
  }
});

test.serial('a client leaving a deep research (an unstored response) in the middle of a step aborts that step at once', async (t) => {
  const { client } = await p.newClient();
  // Deep research: the first step never answers; the client leaves after the first chunk.
  p.fake.script('research-leaver', [{ hold: true }]);
  const abortedBefore = p.fake.aborted();
  const research = await client.chat.completions.create({
    model: REASONING_MODEL,
    messages: [{ role: 'user', content: 'Research otters #script:research-leaver' }],
    deep_research: true,
    stream: true,
  } as any);
  await waitFor(() => p.fake.holding() > 0, 20_000, 'the research step reaching the provider');
  for await (const _chunk of research as any) break; // leaves: the SDK aborts the request
  await waitFor(() => p.fake.aborted() > abortedBefore, 20_000, "the research step's provider request aborted");
  t.is(p.fake.scriptRequests('research-leaver').length, 1, 'no further step was asked');

  // The same through the Responses API with store: false.
  p.fake.script('unstored-leaver', [{ hold: true }]);
  const abortedMid = p.fake.aborted();
  const unstored = await client.responses.create({ model: MODEL, input: 'x #script:unstored-leaver', tools: [], store: false, stream: true });
  await waitFor(() => p.fake.holding() > 0, 20_000, 'the step reaching the provider');
  for await (const _event of unstored) break;
  await waitFor(() => p.fake.aborted() > abortedMid, 20_000, "the unstored response's step aborted");
  t.is(p.fake.holding(), 0);
});
