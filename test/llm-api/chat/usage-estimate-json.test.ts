import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { estimateTextTokens, estimateTokens, estimateTokensOf } from '../../../services/kit/index.js';
import { completeChat } from '../../../services/llm-api/chat/completions.js';
import type { ChatDispatcher } from '../../../services/llm-api/chat/dispatch.js';
import type { ChatRequest } from '../../../services/llm-api/chat/schemas.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { fedAnswer } from '../../helpers/provider-answer.js';
import { attempt, pricedChatDeps, principal } from './priced-domain.js';
import { createTestUser, type TestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';

// A JSON answer without a `usage` object (OpenAI always sends one; not every compatible server
// does) is recorded and charged with the same estimate as a stream without the provider's report,
// marked `usage_estimated`, instead of 0 tokens: token and cost budgets are used up by JSON
// requests as by streamed ones. The answer reaches the client as the provider sent it.

// ---- The domain function, with a dispatcher whose JSON answer is fed by hand. ----

function setup(answer: unknown) {
  const dispatcher: ChatDispatcher = {
    plan: () => [attempt],
    async json(_attempts, request) {
      const fed = fedAnswer({ signal: request.signal, headers: { 'content-type': 'application/json' } });
      fed.push(JSON.stringify(answer));
      fed.end();
      return { value: fed.answer, attempt, tries: 1 };
    },
    async stream() {
      throw new Error('not used');
    },
    logStreamFailure() {},
  };
  return pricedChatDeps(dispatcher);
}

const tools = [{ type: 'function', function: { name: 'lookup', description: 'Looks a thing up', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
const request = (): ChatRequest => ({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a long story' }], tools, n: 2 }) as ChatRequest;

test('a JSON answer without usage: the estimate of every choice (content, refusal, reasoning, tool-call arguments) is recorded, marked, priced and charged; the body passes through', async (t) => {
  const content = 'Once upon a time, "a fox" said:\n';
  const reasoning = 'plot the story';
  const args = '{"q":"a \\"fox\\""}';
  const refusal = 'I will not.';
  const answer = {
    id: 'chatcmpl-up',
    object: 'chat.completion',
    created: 1_699_999_999,
    model: 'up-model',
    choices: [
      { index: 0, message: { role: 'assistant', content, reasoning_content: reasoning, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: args } }] }, finish_reason: 'tool_calls' },
      { index: 1, message: { role: 'assistant', content: null, refusal, reasoning: 'no' }, finish_reason: 'stop' },
    ],
  };
  const { deps, records, settled } = setup(answer);
  const result = await completeChat(deps, principal, { request: request(), requestId: 'r-json' }, new AbortController());
  if (result.kind !== 'json') return t.fail();

  const prompt = estimateTokens({ role: 'system', content: 'Be brief.' }) + estimateTokens({ role: 'user', content: 'Tell me a long story' }) + estimateTokens({ tool_calls: tools });
  const completion = estimateTextTokens(content.length + reasoning.length + args.length + refusal.length + 'no'.length);
  const cost = Math.round(prompt * 1 + completion * 100);
  t.is(records.length, 1);
  t.like(records[0], {
    request_id: 'r-json',
    stream: false,
    status: 200,
    outcome: 'ok',
    usage_estimated: true,
    prompt_tokens: prompt,
    completion_tokens: completion,
    reasoning_tokens: estimateTextTokens(reasoning.length + 'no'.length),
    total_tokens: prompt + completion,
    cost_micro_usd: cost,
  });
  t.true(prompt > 0 && completion > 0 && cost > 0);
  t.deepEqual(settled, [{ cost, tokens: prompt + completion }]);
  // The edge's access log gets the same counts as the record.
  t.like(result.report, { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
  // The client's answer is the provider's: no usage is made up for it.
  t.false(Object.hasOwn(result.body, 'usage'));
  t.is(result.body.choices[0]!.message.content, content);
  t.is(result.body.id, 'chatcmpl-up');
});

test("a JSON answer with usage: the provider's counts are recorded and charged exactly, not estimated", async (t) => {
  const answer = { id: 'c', object: 'chat.completion', created: 1, model: 'up-model', choices: [{ index: 0, message: { role: 'assistant', content: 'A story much longer than the counts say.' }, finish_reason: 'stop' }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } };
  const { deps, records, settled } = setup(answer);
  const result = await completeChat(deps, principal, { request: request(), requestId: 'r-exact' }, new AbortController());
  if (result.kind !== 'json') return t.fail();
  t.like(records[0], { usage_estimated: false, prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, cost_micro_usd: 7 + 300 });
  t.deepEqual(settled, [{ cost: 307, tokens: 10 }]);
  t.like(result.body.usage, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
});

test('a JSON answer with "usage": null is estimated like one without the member', async (t) => {
  const answer = { id: 'c', object: 'chat.completion', created: 1, model: 'up-model', choices: [{ index: 0, message: { role: 'assistant', content: 'twelve chars' }, finish_reason: 'stop' }], usage: null };
  const { deps, records } = setup(answer);
  const result = await completeChat(deps, principal, { request: { ...request(), tools: undefined }, requestId: 'r-null' }, new AbortController());
  if (result.kind !== 'json') return t.fail();
  t.like(records[0], { usage_estimated: true, prompt_tokens: estimateTokensOf(request().messages), completion_tokens: estimateTextTokens('twelve chars'.length) });
  t.is(result.body.usage, null);
});

// ---- llm-api over HTTP, with a provider of this file's own that never reports usage. ----

const ANSWER = 'word '.repeat(100); // 500 characters: 125 estimated tokens
const PROMPT_PER_1K = 1000; // µUSD
const COMPLETION_PER_1K = 100_000;
let h: LlmHarness;
let provider: http.Server;
/** JSON answers held until the test releases them (the requests whose prompt says "#gate"). */
const held: Array<() => void> = [];

/** OpenAI-compatible, except that no answer carries `usage` (JSON or stream, include_usage or not). */
async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ object: 'list', data: [{ id: 'noisy', object: 'model', created: 1, owned_by: 'x' }] }));
    return;
  }
  const body = JSON.parse(Buffer.concat(chunks).toString());
  if (body.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const piece of [ANSWER.slice(0, 200), ANSWER.slice(200)]) {
      res.write(`data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`);
    }
    res.write(`data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
    res.end('data: [DONE]\n\n');
    return;
  }
  const send = () => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message: { role: 'assistant', content: ANSWER }, finish_reason: 'stop' }] }));
  };
  if (JSON.stringify(body.messages).includes('#gate')) held.push(send);
  else send();
}

test.before(async () => {
  provider = http.createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
  provider.listen(0, '127.0.0.1');
  await once(provider, 'listening');
  h = await startLlmHarness();
  const created = await h.call('POST', '/v1/admin/providers', { name: 'No usage', vendor: 'fake', base_url: `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1` });
  if (created.status !== 201 && created.status !== 200) throw new Error(`provider: ${created.status} ${JSON.stringify(created.body)}`);
  const pms = (await h.call('GET', `/v1/admin/models/provider-models?provider_id=${created.body.id}`)).body.data;
  const pm = pms.find((m: any) => m.model_public_id === 'noisy');
  const priced = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, {
    pricing: { lines: [{ amount_micro_usd: PROMPT_PER_1K, currency: 'USD', unit: 'per_1k_prompt_tokens' }, { amount_micro_usd: COMPLETION_PER_1K, currency: 'USD', unit: 'per_1k_completion_tokens' }] },
  });
  if (priced.status !== 200) throw new Error(`pricing: ${priced.status} ${JSON.stringify(priced.body)}`);
});
test.after.always(async () => {
  await h?.close();
  provider?.closeAllConnections();
  provider?.close();
});

const costOf = (prompt: number, completion: number) => Math.round((prompt * PROMPT_PER_1K) / 1000 + (completion * COMPLETION_PER_1K) / 1000);
const messagesOf = (text: string) => [{ role: 'user', content: text }];
/** The estimate of one request with `text` as its prompt and ANSWER as its answer. */
const estimateOf = (text: string) => ({ prompt: estimateTokensOf(messagesOf(text)), completion: estimateTextTokens(ANSWER.length) });

async function budgetedUser(budget: { max_tokens?: number; max_budget_micro_usd?: number }): Promise<TestUser> {
  const user = await createTestUser(h.service.runtime.db.knex);
  const set = await h.call('PATCH', `/v1/admin/users/${user.id}`, budget);
  if (set.status !== 200) throw new Error(`budget: ${set.status} ${JSON.stringify(set.body)}`);
  return user;
}

const chat = (user: TestUser, text: string, stream = false) => h.call('POST', '/v1/chat/completions', { model: 'noisy', messages: messagesOf(text), ...(stream ? { stream: true } : {}) }, user);

const usageRows = (userId: string, n: number) =>
  waitFor(
    async () => {
      const rows = await h.service.runtime.db.knex('llm_usage').where({ user_id: userId }).orderBy('created_at');
      return rows.length >= n && rows;
    },
    30_000,
    `${n} usage rows`,
  );

/** The user's spend counter once `n` requests of the user have settled and none is in flight. */
const settledCounter = (userId: string, n: number) =>
  waitFor(
    async () => {
      const row = await h.service.runtime.db.knex('llm_spend_counters').where({ scope: 'user', scope_id: userId }).first();
      return row && Number(row.settled) >= n && row.in_flight === 0 && row;
    },
    30_000,
    `the spend counter settled ${n} times`,
  );

test('JSON answers without usage use up a token budget: each is recorded with the estimate and its cost, and the budget refuses once used up', async (t) => {
  const text = 'please answer at length';
  const { prompt, completion } = estimateOf(text);
  const per = prompt + completion;
  const user = await budgetedUser({ max_tokens: Math.floor(per * 2.5) });
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await chat(user, text);
    statuses.push(res.status);
    if (res.status === 200) t.false(Object.hasOwn(res.body, 'usage'), 'the client gets the answer as the provider sent it');
    else t.is(res.body.error.code, 'insufficient_quota');
  }
  // Under budget before each of the first three (0, 1 and 2 requests' tokens), used up after the third.
  t.deepEqual(statuses, [200, 200, 200, 429]);

  const counter = await settledCounter(user.id, 3);
  t.is(Number(counter.tokens), 3 * per);
  t.is(Number(counter.spent_micro_usd), 3 * costOf(prompt, completion));
  const rows = await usageRows(user.id, 3);
  t.is(rows.length, 3);
  for (const row of rows) {
    t.like(row, { stream: false, status: 200, outcome: 'ok', usage_estimated: true, prompt_tokens: prompt, completion_tokens: completion, total_tokens: per });
    t.is(Number(row.cost_micro_usd), costOf(prompt, completion));
  }
  t.true(completion > 0 && costOf(prompt, completion) > 0);
});

test('a JSON request and a streamed one with the same answer are estimated, recorded and charged alike', async (t) => {
  const text = 'the same question twice';
  const { prompt, completion } = estimateOf(text);
  const jsonUser = await budgetedUser({ max_tokens: 1_000_000, max_budget_micro_usd: 50_000_000 });
  const streamUser = await budgetedUser({ max_tokens: 1_000_000, max_budget_micro_usd: 50_000_000 });
  t.is((await chat(jsonUser, text)).status, 200);
  const streamed = await chat(streamUser, text, true);
  t.is(streamed.status, 200);
  t.true(String(streamed.body).includes('[DONE]'));

  const [jsonCounter, streamCounter] = await Promise.all([settledCounter(jsonUser.id, 1), settledCounter(streamUser.id, 1)]);
  t.is(Number(jsonCounter.tokens), prompt + completion);
  t.is(Number(jsonCounter.tokens), Number(streamCounter.tokens));
  t.is(Number(jsonCounter.spent_micro_usd), Number(streamCounter.spent_micro_usd));
  const [[jsonRow], [streamRow]] = await Promise.all([usageRows(jsonUser.id, 1), usageRows(streamUser.id, 1)]);
  const counts = { usage_estimated: true, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  t.like(jsonRow, { stream: false, ...counts });
  t.like(streamRow, { stream: true, ...counts });
  t.is(Number(jsonRow.cost_micro_usd), Number(streamRow.cost_micro_usd));
});

test('under a budget, JSON requests run side by side once one has settled (not one at a time with budget_busy)', async (t) => {
  const user = await budgetedUser({ max_tokens: 1_000_000 });
  t.is((await chat(user, 'a first request')).status, 200);
  await settledCounter(user.id, 1);

  // Three at once, each held by the provider until all three have either reached it or been answered.
  const before = held.length;
  const statuses: number[] = [];
  const requests = [1, 2, 3].map((i) => chat(user, `side by side ${i} #gate`).then((res) => void statuses.push(res.status)));
  await waitFor(() => held.length - before + statuses.length === 3, 30_000, 'every request at the provider or answered');
  for (const send of held.splice(before)) send();
  await Promise.all(requests);
  t.deepEqual(statuses, [200, 200, 200]);
});
