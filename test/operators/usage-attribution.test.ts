import test from 'ava';
import type OpenAI from 'openai';
import { lastToolOutput, MODEL, startResponsesPlatform, type ResponsesPlatform } from '../responses/harness.js';
import { waitFor } from '../helpers/wait.js';

// Usage attribution through the edge with the official SDK: a chat request made in a conversation
// counts toward that conversation's project (filter and group), and the steps of a Responses API
// call (each a chat completion llm-api is asked for with the caller's identity) count toward the
// user and key that made it, tokens and cost included.
const PRICE_PER_1K_PROMPT = 2000; // µUSD
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform({ LLM_USAGE_FLUSH_MS: '20' });
  const pms = await p.api(p.adminKey, 'GET', '/v1/admin/models/provider-models?limit=100');
  for (const pm of pms.json.data) {
    await p.api(p.adminKey, 'PATCH', `/v1/admin/models/provider-models/${pm.id}`, { pricing: { lines: [{ unit: 'per_1k_prompt_tokens', amount_micro_usd: PRICE_PER_1K_PROMPT }] } });
  }
});
test.after.always(async () => {
  await p?.stop();
});

const usage = (client: OpenAI, query: Record<string, string>) => client.get('/usage', { query }) as Promise<{ data: Array<Record<string, any>> }>;
const costOf = (prompt: number) => Math.round((prompt * PRICE_PER_1K_PROMPT) / 1000);

/** Waits until the caller's report counts `requests` requests (the writer works off the request path). */
const settled = (client: OpenAI, requests: number) =>
  waitFor(async () => {
    const report = await usage(client, {});
    return report.data[0]?.requests === requests ? report : undefined;
  }, 15_000, `${requests} requests in the usage report`);

test('a chat request in a conversation counts toward its project: filter by project_id and group by project', async (t) => {
  const { client, userId } = await p.newClient();
  const project: any = await client.post('/projects', { body: { name: 'Attribution' } });
  const conversation: any = await client.post('/conversations', { body: { project_id: project.id, title: 'in the project' } });
  const inProject = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'inside the project' }], store: true, conversation: conversation.id } as any);
  const outside = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'no conversation at all' }] });
  await settled(client, 2);

  const filtered = await usage(client, { project_id: project.id });
  t.is(filtered.data.length, 1);
  t.like(filtered.data[0], { requests: 1, prompt_tokens: inProject.usage!.prompt_tokens, completion_tokens: inProject.usage!.completion_tokens, cost_micro_usd: costOf(inProject.usage!.prompt_tokens) });

  const byProject = await usage(client, { group_by: 'project' });
  const rows = new Map(byProject.data.map((row) => [row.project_id, row]));
  t.is(rows.size, 2);
  t.like(rows.get(project.id), { requests: 1, prompt_tokens: inProject.usage!.prompt_tokens });
  t.like(rows.get(null), { requests: 1, prompt_tokens: outside.usage!.prompt_tokens });

  // Admins see the same, per user, and in the CSV export.
  const admin = await p.api(p.adminKey, 'GET', `/v1/admin/usage?project_id=${project.id}&group_by=user,project`);
  t.deepEqual(admin.json.data.map((row: any) => [row.user_id, row.project_id, row.requests]), [[userId, project.id, 1]]);
  const csv = await (await fetch(`${p.url}/v1/admin/usage/export?format=csv&group_by=project&user_id=${userId}`, { headers: { 'X-API-Key': p.adminKey } })).text();
  const [header, ...lines] = csv.trim().split('\n');
  t.true(header!.startsWith('project_id,requests,'), header);
  t.deepEqual(lines.map((line) => line.split(',').slice(0, 2)).sort(), [['', '1'], [project.id, '1']].sort());
});

test('the steps of a /v1/responses call, tool calls included, show up in GET /v1/usage for its user and key', async (t) => {
  p.fake.script('attributed', [
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6*7)' } }] },
    { content: (messages) => `It is ${lastToolOutput(messages).match(/\d+/)?.[0] ?? '?'}.` },
  ]);
  const { client, userId } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'Compute 6*7 #script:attributed' });
  t.is(response.status, 'completed');
  t.true(response.output.some((item) => item.type === 'mcp_call'), 'a tool was called');
  const steps = (response as any).step_usage as Array<{ input_tokens: number; output_tokens: number }>;
  t.is(steps.length, 2);
  const input = steps.reduce((sum, s) => sum + s.input_tokens, 0);
  const output = steps.reduce((sum, s) => sum + s.output_tokens, 0);
  t.is(response.usage!.input_tokens, input);

  const report = await settled(client, steps.length);
  t.like(report.data[0], { requests: 2, prompt_tokens: input, completion_tokens: output, total_tokens: input + output });
  t.is(report.data[0]!.cost_micro_usd, steps.reduce((sum, s) => sum + costOf(s.input_tokens), 0));

  // Attributed to the key the call was made with, and visible to admins under the user.
  const keyId = (await p.runtime.db.knex('identity_api_keys').where({ user_id: userId }).first()).id;
  const byKey = await usage(client, { group_by: 'key,model' });
  t.deepEqual(byKey.data.map((row) => [row.key_id, row.model, row.requests]), [[keyId, MODEL, 2]]);
  const admin = await p.api(p.adminKey, 'GET', `/v1/admin/usage?user_id=${userId}`);
  t.like(admin.json.data[0], { requests: 2, prompt_tokens: input, completion_tokens: output });
});
