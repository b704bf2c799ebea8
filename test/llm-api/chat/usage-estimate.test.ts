import { randomUUID } from 'node:crypto';
import test from 'ava';
import OpenAI from 'openai';
import { estimateTextTokens, estimateTokensOf } from '../../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';
import { createTestUser } from '../../helpers/users.js';

// A stream cut before the provider's usage report (the client leaves, the provider fails
// mid-stream) is recorded and charged with an estimate, marked `usage_estimated`, instead of 0
// tokens and 0 cost; a stream with the report keeps the provider's counts. Real PostgreSQL: the
// usage row comes from the batch writer, the budget from the user's spend counter.
const PROMPT_PER_1K = 1000; // µUSD
const COMPLETION_PER_1K = 100_000;
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'estimate', models: [{ id: 'est-model' }] });
  h = await startLlmHarness();
  const providerId = (await h.call('POST', '/v1/admin/providers', { name: 'Estimate', vendor: 'fake', base_url: fake.url })).body.id;
  const pms = (await h.call('GET', `/v1/admin/models/provider-models?provider_id=${providerId}`)).body.data;
  const pm = pms.find((m: any) => m.model_public_id === 'est-model');
  const priced = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, {
    pricing: { lines: [{ amount_micro_usd: PROMPT_PER_1K, currency: 'USD', unit: 'per_1k_prompt_tokens' }, { amount_micro_usd: COMPLETION_PER_1K, currency: 'USD', unit: 'per_1k_completion_tokens' }] },
  });
  if (priced.status !== 200) throw new Error(`pricing: ${priced.status} ${JSON.stringify(priced.body)}`);
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const costOf = (prompt: number, completion: number) => Math.round((prompt * PROMPT_PER_1K) / 1000 + (completion * COMPLETION_PER_1K) / 1000);

/** A user of its own with a daily budget in money and tokens, and an SDK client calling as that user. */
async function budgetedUser() {
  const user = await createTestUser(h.service.runtime.db.knex);
  const set = await h.call('PATCH', `/v1/admin/users/${user.id}`, { max_budget_micro_usd: 50_000_000, max_tokens: 1_000_000 });
  if (set.status !== 200) throw new Error(`budget: ${set.status} ${JSON.stringify(set.body)}`);
  const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'unused-by-llm-api', maxRetries: 0, defaultHeaders: h.headers(user) });
  return { user, client };
}

const usageRow = (marker: string) =>
  waitFor(() => h.service.runtime.db.knex('llm_usage').whereRaw("metadata->>'marker' = ?", [marker]).first(), 30_000, `the usage row of ${marker}`);

/** The user's spend counter once every request of the user has settled. */
const settledCounter = (userId: string) =>
  waitFor(
    async () => {
      const row = await h.service.runtime.db.knex('llm_spend_counters').where({ scope: 'user', scope_id: userId }).first();
      return row && Number(row.settled) >= 1 && row.in_flight === 0 && row;
    },
    30_000,
    'the spend counter settled',
  );

test('a client that leaves before the usage report is charged an estimate: nonzero tokens and cost, marked, and the budget advanced', async (t) => {
  const { user, client } = await budgetedUser();
  const marker = `leave-${randomUUID()}`;
  const messages = [
    { role: 'system' as const, content: 'You answer at length.' },
    { role: 'user' as const, content: `write me an essay #hold ${marker}` },
  ];
  const controller = new AbortController();
  const stream = await client.chat.completions.create({ model: 'est-model', messages, stream: true, metadata: { marker } } as any, { signal: controller.signal });
  let relayed = '';
  try {
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
      relayed += chunk.choices[0]?.delta.content ?? '';
      if (relayed === 'held') controller.abort();
    }
  } catch {
    // the SDK may end the iteration with an abort error or quietly
  }
  t.is(relayed, 'held');
  await fake.abortedFor(marker);

  const row = await usageRow(marker);
  const prompt = estimateTokensOf(messages);
  const completion = estimateTextTokens('held'.length);
  t.like(row, { user_id: user.id, outcome: 'client_closed', status: 499, stream: true, usage_estimated: true, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
  t.true(completion > 0);
  t.is(Number(row.cost_micro_usd), costOf(prompt, completion));
  t.true(Number(row.cost_micro_usd) > 0);

  const counter = await settledCounter(user.id);
  t.is(Number(counter.spent_micro_usd), costOf(prompt, completion));
  t.is(Number(counter.tokens), prompt + completion);
});

test('a provider that fails mid-stream after some content: the relayed text is estimated and charged', async (t) => {
  const { user, client } = await budgetedUser();
  const marker = `cut-${randomUUID()}`;
  const messages = [{ role: 'user' as const, content: `three pieces then the socket dies #midstream:3 ${marker}` }];
  const raw = await client.chat.completions.create({ model: 'est-model', messages, stream: true, metadata: { marker } } as any).asResponse();
  const text = await raw.text();
  t.true(text.includes('"code":"upstream_error"'), text);
  const row = await usageRow(marker);
  // "Hello", " from", " estimate": the three content pieces the fake sent before it cut the connection.
  const completion = estimateTextTokens('Hello from estimate'.length);
  const prompt = estimateTokensOf(messages);
  t.like(row, { outcome: 'stream_error', status: 502, usage_estimated: true, prompt_tokens: prompt, completion_tokens: completion });
  const counter = await settledCounter(user.id);
  t.is(Number(counter.spent_micro_usd), costOf(prompt, completion));
  t.is(Number(counter.tokens), prompt + completion);
});

test("a stream that completes records the provider's exact usage, not estimated, and charges it", async (t) => {
  const { user, client } = await budgetedUser();
  const marker = `whole-${randomUUID()}`;
  const stream = await client.chat.completions.create({ model: 'est-model', messages: [{ role: 'user', content: `a short answer please ${marker}` }], stream: true, stream_options: { include_usage: true }, metadata: { marker } } as any);
  let reported: OpenAI.CompletionUsage | null | undefined;
  for await (const chunk of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) if (chunk.usage) reported = chunk.usage;
  // The fake counts words: 5 in the prompt, 7 in its answer "Hello from estimate w1 w2 w3 w4" (the
  // estimate would say 20 and 8).
  t.like(reported, { prompt_tokens: 5, completion_tokens: 7 });
  const row = await usageRow(marker);
  t.like(row, { outcome: 'ok', status: 200, usage_estimated: false, prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 });
  t.is(Number(row.cost_micro_usd), costOf(5, 7));
  const counter = await settledCounter(user.id);
  t.is(Number(counter.spent_micro_usd), costOf(5, 7));
  t.is(Number(counter.tokens), 12);
});
