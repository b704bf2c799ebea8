import test, { type ExecutionContext } from 'ava';
import { waitFor } from '../helpers/wait.js';
import { MODEL, REASONING_MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// A response in a conversation of a project is made in that project, as a chat completion naming
// the conversation is: llm-api prepends the project's instruction to every step and attributes each
// step's usage to the project (per-project usage reports). response-api tells llm-api the project
// in the X-Gateway-Project-ID header, which only a platform service can send (the edge strips a
// client's), and llm-api honours it only for a project of the caller. Deep research made in a project
// hands the project to response-api with the same header, so its steps are the project's too.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const INSTRUCTION = 'Answer in the voice of a lighthouse keeper.';

/** A new user, an `openai` client of theirs, a project of theirs with `INSTRUCTION`, and a conversation in it. */
async function projectConversation() {
  const { client, key, userId } = await p.newClient();
  const project = await p.api(key, 'POST', '/v1/projects', { name: 'Lighthouse', instruction: INSTRUCTION });
  if (project.status !== 201 && project.status !== 200) throw new Error(`project: ${project.status} ${JSON.stringify(project.json)}`);
  const conversation = await p.api(key, 'POST', '/v1/conversations', { project_id: project.json.id });
  if (conversation.status !== 200 && conversation.status !== 201) throw new Error(`conversation: ${conversation.status} ${JSON.stringify(conversation.json)}`);
  return { client, key, userId, projectId: project.json.id as string, conversationId: conversation.json.id as string };
}

/** The usage rows llm-api recorded for `userId`, once there are `count` of them (the recorder writes in batches). */
async function usageRows(userId: string, count: number): Promise<Array<{ request_id: string; project_id: string | null }>> {
  const read = () => p.runtime.db.knex('llm_usage').where({ user_id: userId }).select('request_id', 'project_id').orderBy('created_at');
  return waitFor(async () => {
    const rows = await read();
    return rows.length >= count ? rows : null;
  }, 30_000, `${count} usage rows`);
}

test('every step of a response in a project conversation gets the project instruction first, and its usage is the project\'s', async (t) => {
  const { client, userId, projectId, conversationId } = await projectConversation();
  // Two steps: a call of a tool that does not exist (its error goes back to the model), then the answer.
  p.fake.script('project-steps', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }, { content: 'Ahoy.' }]);
  const response = await client.responses.create({ model: MODEL, input: 'hello #script:project-steps', conversation: conversationId, instructions: 'Be brief.', tools: [] });
  t.is(response.status, 'completed');
  t.is(response.output_text, 'Ahoy.');

  const sent = p.fake.scriptRequests('project-steps');
  t.is(sent.length, 2);
  for (const request of sent) {
    const messages = request.body.messages as Array<{ role: string; content: unknown }>;
    // The project's instruction first (as for a chat request naming the conversation), then the response's.
    t.deepEqual(messages[0], { role: 'system', content: INSTRUCTION });
    t.deepEqual(messages[1], { role: 'system', content: 'Be brief.' });
    t.is(messages.filter((m) => m.content === INSTRUCTION).length, 1);
  }

  const rows = await usageRows(userId, 2);
  t.is(rows.length, 2);
  t.deepEqual(
    rows.map((r) => r.project_id),
    [projectId, projectId],
  );
  // The stored context keeps no copy of the instruction: llm-api adds it to each step.
  const stored = await p.runtime.db.knex('responses').where({ id: response.id }).first();
  t.false(JSON.stringify(stored.context).includes(INSTRUCTION));
});

test('a response chained with previous_response_id stays in the project of its conversation (streamed too)', async (t) => {
  const { client, userId, projectId, conversationId } = await projectConversation();
  p.fake.script('project-first', [{ content: 'first' }]);
  const first = await client.responses.create({ model: MODEL, input: 'one #script:project-first', conversation: conversationId, tools: [] });
  t.is(first.status, 'completed');

  p.fake.script('project-chained', [{ content: 'second' }]);
  const stream = await client.responses.create({ model: MODEL, input: 'two #script:project-chained', previous_response_id: first.id, tools: [], stream: true });
  let completed: any = null;
  for await (const event of stream) if (event.type === 'response.completed') completed = event.response;
  t.is(completed?.status, 'completed');
  t.deepEqual(completed?.conversation, { id: conversationId });

  const messages = p.fake.scriptRequests('project-chained')[0]!.body.messages as Array<{ role: string; content: unknown }>;
  t.deepEqual(messages[0], { role: 'system', content: INSTRUCTION });
  t.is(messages.filter((m) => m.content === INSTRUCTION).length, 1);
  const rows = await usageRows(userId, 2);
  t.deepEqual(
    rows.map((r) => r.project_id),
    [projectId, projectId],
  );
});

test('the per-project usage report counts the steps of a response in the project', async (t) => {
  const { client, key, projectId, conversationId } = await projectConversation();
  p.fake.script('project-report', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }, { content: 'done' }]);
  const response = await client.responses.create({ model: MODEL, input: 'count me #script:project-report', conversation: conversationId, tools: [] });
  t.is(response.status, 'completed');
  const report = await waitFor(async () => {
    const res = await p.api(key, 'GET', `/v1/usage?project_id=${projectId}&group_by=project`);
    const rows = res.json?.data ?? [];
    return rows.length > 0 && rows.reduce((n: number, r: { requests: number }) => n + Number(r.requests), 0) >= 2 ? rows : null;
  }, 30_000, 'the project usage report');
  t.is(report.length, 1);
  t.is(report[0].project_id, projectId);
  t.is(Number(report[0].requests), 2);
});

test('a response in a conversation outside any project sends no project instruction and attributes nothing', async (t) => {
  const { client, userId } = await p.newClient();
  const conversation = await client.conversations.create({});
  p.fake.script('no-project', [{ content: 'plain' }]);
  const response = await client.responses.create({ model: MODEL, input: 'x #script:no-project', conversation: conversation.id, tools: [] });
  t.is(response.status, 'completed');
  const messages = p.fake.scriptRequests('no-project')[0]!.body.messages as Array<{ role: string }>;
  t.deepEqual(
    messages.map((m) => m.role),
    ['user'],
  );
  const rows = await usageRows(userId, 1);
  t.is(rows[0]!.project_id, null);
});

test('a client cannot name a project with X-Gateway-Project-ID: the edge strips it', async (t) => {
  const { key, userId, projectId } = await projectConversation();
  p.fake.script('client-header', [{ content: 'no project' }]);
  const res = await fetch(`${p.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'x-gateway-project-id': projectId },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x #script:client-header' }] }),
  });
  t.is(res.status, 200);
  const messages = p.fake.scriptRequests('client-header')[0]!.body.messages as Array<{ role: string }>;
  t.deepEqual(
    messages.map((m) => m.role),
    ['user'],
  );
  const rows = await usageRows(userId, 1);
  t.is(rows[0]!.project_id, null);
});

test("llm-api honours X-Gateway-Project-ID only for a project of the caller", async (t) => {
  const owner = await projectConversation();
  const other = await p.newClient();
  const direct = (userId: string, script: string) =>
    fetch(`${p.serviceUrl('llm-api')}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-gateway-token': p.gatewaySecret, 'x-auth-method': 'apikey', 'x-user-id': userId, 'x-user-subject': userId, 'x-gateway-project-id': owner.projectId },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `x #script:${script}` }] }),
    });
  p.fake.script('header-owner', [{ content: 'in the project' }]);
  p.fake.script('header-other', [{ content: 'not in it' }]);
  t.is((await direct(owner.userId, 'header-owner')).status, 200);
  t.is((await direct(other.userId, 'header-other')).status, 200);

  t.deepEqual(p.fake.scriptRequests('header-owner')[0]!.body.messages[0], { role: 'system', content: INSTRUCTION });
  t.deepEqual(
    (p.fake.scriptRequests('header-other')[0]!.body.messages as Array<{ role: string }>).map((m) => m.role),
    ['user'],
  );
  t.is((await usageRows(owner.userId, 1))[0]!.project_id, owner.projectId);
  t.is((await usageRows(other.userId, 1))[0]!.project_id, null);
});

/** The research instruction llm-api gives the loop (research.ts `RESEARCH_INSTRUCTIONS`), by its first words. */
const RESEARCH_START = 'You are a research assistant';

/** Each step of `script`: the project's instruction first and once, the research instruction after it. */
function assertProjectSteps(t: ExecutionContext, script: string, steps: number) {
  const sent = p.fake.scriptRequests(script);
  t.is(sent.length, steps);
  for (const request of sent) {
    const messages = request.body.messages as Array<{ role: string; content: unknown }>;
    t.deepEqual(messages[0], { role: 'system', content: INSTRUCTION });
    t.is(messages[1]!.role, 'system');
    t.true(String(messages[1]!.content).startsWith(RESEARCH_START), String(messages[1]!.content));
    t.is(messages.filter((m) => JSON.stringify(m.content).includes(INSTRUCTION)).length, 1, 'the instruction is sent once');
  }
}

test('deep research in a conversation of a project: each step gets the instruction once and its usage is the project\'s', async (t) => {
  const { client, userId, projectId, conversationId } = await projectConversation();
  // Two steps: a call of a tool the research does not offer (its error goes back to the model), then the answer.
  p.fake.script('project-research', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }, { content: 'The lamp is lit at dusk.' }]);
  const completion: any = await client.chat.completions.create({
    model: REASONING_MODEL,
    messages: [{ role: 'user', content: 'When is the lamp lit? #script:project-research' }],
    conversation: conversationId,
    deep_research: true,
  } as any);
  t.is(completion.choices[0].message.content, 'The lamp is lit at dusk.');
  assertProjectSteps(t, 'project-research', 2);
  // The research request records no usage of its own: the rows are its two steps, both the project's.
  const rows = await usageRows(userId, 2);
  t.deepEqual(
    rows.map((r) => r.project_id),
    [projectId, projectId],
  );
});

test("a platform service's deep research in a project (X-Gateway-Project-ID, streamed) is attributed to it step by step", async (t) => {
  const { userId, projectId } = await projectConversation();
  p.fake.script('header-research', [{ tool_calls: [{ name: 'no_such_tool', arguments: {} }] }, { content: 'At dusk.' }]);
  const res = await fetch(`${p.serviceUrl('llm-api')}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gateway-token': p.gatewaySecret, 'x-auth-method': 'apikey', 'x-user-id': userId, 'x-user-subject': userId, 'x-gateway-project-id': projectId },
    body: JSON.stringify({ model: REASONING_MODEL, messages: [{ role: 'user', content: 'x #script:header-research' }], deep_research: true, stream: true }),
  });
  t.is(res.status, 200);
  t.true((await res.text()).includes('data: [DONE]'));
  assertProjectSteps(t, 'header-research', 2);
  const rows = await usageRows(userId, 2);
  t.deepEqual(
    rows.map((r) => r.project_id),
    [projectId, projectId],
  );
});

test('response-api makes a response in the X-Gateway-Project-ID a platform service sends, never in one a client sends', async (t) => {
  const { key, userId, projectId } = await projectConversation();
  p.fake.script('responses-client-header', [{ content: 'not in it' }]);
  p.fake.script('responses-service-header', [{ content: 'in it' }]);
  const body = (script: string) => JSON.stringify({ model: MODEL, input: `x #script:${script}`, tools: [] });
  // Through the edge, which strips every client-sent X-Gateway-* header.
  const viaEdge = await fetch(`${p.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'x-gateway-project-id': projectId }, body: body('responses-client-header') });
  t.is(viaEdge.status, 200);
  const direct = await fetch(`${p.serviceUrl('response-api')}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gateway-token': p.gatewaySecret, 'x-auth-method': 'apikey', 'x-user-id': userId, 'x-user-subject': userId, 'x-gateway-project-id': projectId },
    body: body('responses-service-header'),
  });
  t.is(direct.status, 200);

  t.deepEqual(
    (p.fake.scriptRequests('responses-client-header')[0]!.body.messages as Array<{ role: string }>).map((m) => m.role),
    ['user'],
  );
  t.deepEqual(p.fake.scriptRequests('responses-service-header')[0]!.body.messages[0], { role: 'system', content: INSTRUCTION });
  const rows = await usageRows(userId, 2);
  t.deepEqual(rows.map((r) => r.project_id).sort(), [null, projectId].sort());
});

/** `POST /v1/responses` straight to response-api as a platform service acting for `userId`, in `projectId` when given. */
function serviceResponse(userId: string, body: Record<string, unknown>, projectId?: string) {
  return fetch(`${p.serviceUrl('response-api')}/v1/responses`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-gateway-token': p.gatewaySecret,
      'x-auth-method': 'apikey',
      'x-user-id': userId,
      'x-user-subject': userId,
      ...(projectId ? { 'x-gateway-project-id': projectId } : {}),
    },
    body: JSON.stringify(body),
  });
}

test('a response chained with previous_response_id from one made in a project (no conversation) stays in that project, along the chain', async (t) => {
  const { client, userId, projectId } = await projectConversation();
  p.fake.script('chain-header-first', [{ content: 'first' }]);
  const first = await serviceResponse(userId, { model: MODEL, input: 'one #script:chain-header-first', tools: [] }, projectId);
  t.is(first.status, 200);
  const firstId = ((await first.json()) as any).id as string;

  // Through the edge with the SDK: no project header.
  p.fake.script('chain-header-second', [{ content: 'second' }]);
  const second = await client.responses.create({ model: MODEL, input: 'two #script:chain-header-second', previous_response_id: firstId, tools: [] });
  t.is(second.status, 'completed');
  t.is(second.conversation, null);
  // A chain of the chain (streamed) inherits the project the second response inherited.
  p.fake.script('chain-header-third', [{ content: 'third' }]);
  const stream = await client.responses.create({ model: MODEL, input: 'three #script:chain-header-third', previous_response_id: second.id, tools: [], stream: true });
  let completed: any = null;
  for await (const event of stream) if (event.type === 'response.completed') completed = event.response;
  t.is(completed?.status, 'completed');

  for (const script of ['chain-header-second', 'chain-header-third']) {
    const messages = p.fake.scriptRequests(script)[0]!.body.messages as Array<{ role: string; content: unknown }>;
    t.deepEqual(messages[0], { role: 'system', content: INSTRUCTION }, script);
    t.is(messages.filter((m) => m.content === INSTRUCTION).length, 1, `${script}: the instruction is sent once`);
  }
  const rows = await usageRows(userId, 3);
  t.deepEqual(
    rows.map((r) => r.project_id),
    [projectId, projectId, projectId],
  );
});

test('a chained request naming another project than the previous response\'s is a 400 naming previous_response_id; the same project, or one after a response in none, is taken', async (t) => {
  const { userId, projectId, key } = await projectConversation();
  const other = await p.api(key, 'POST', '/v1/projects', { name: 'Harbour', instruction: 'Answer as a harbour master.' });
  t.true(other.status === 200 || other.status === 201);
  p.fake.script('chain-mismatch-first', [{ content: 'first' }]);
  const first = await serviceResponse(userId, { model: MODEL, input: 'one #script:chain-mismatch-first', tools: [] }, projectId);
  t.is(first.status, 200);
  const firstId = ((await first.json()) as any).id as string;

  p.fake.script('chain-mismatch-other', [{ content: 'never' }]);
  const refused = await serviceResponse(userId, { model: MODEL, input: 'two #script:chain-mismatch-other', previous_response_id: firstId, tools: [] }, other.json.id);
  t.is(refused.status, 400);
  const error = ((await refused.json()) as any).error;
  t.is(error.param, 'previous_response_id');
  t.is(error.type, 'invalid_request_error');
  t.is(p.fake.scriptRequests('chain-mismatch-other').length, 0, 'nothing ran');

  p.fake.script('chain-mismatch-same', [{ content: 'same' }]);
  const same = await serviceResponse(userId, { model: MODEL, input: 'two #script:chain-mismatch-same', previous_response_id: firstId, tools: [] }, projectId);
  t.is(same.status, 200);
  t.deepEqual(p.fake.scriptRequests('chain-mismatch-same')[0]!.body.messages[0], { role: 'system', content: INSTRUCTION });

  // A response in no project continued in a project: the project named is taken.
  p.fake.script('chain-none-first', [{ content: 'none' }]);
  const plain = await serviceResponse(userId, { model: MODEL, input: 'one #script:chain-none-first', tools: [] });
  t.is(plain.status, 200);
  p.fake.script('chain-none-named', [{ content: 'named' }]);
  const named = await serviceResponse(userId, { model: MODEL, input: 'two #script:chain-none-named', previous_response_id: ((await plain.json()) as any).id, tools: [] }, projectId);
  t.is(named.status, 200);
  t.deepEqual(p.fake.scriptRequests('chain-none-named')[0]!.body.messages[0], { role: 'system', content: INSTRUCTION });
});
