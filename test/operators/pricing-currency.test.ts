import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../fakes/llm-harness.js';

// Pricing amounts are micro-USD and cost is added up, reported and budgeted in USD: a line priced in
// another currency used to be stored and then charged as if it were USD (a EUR model reported and
// budgeted as USD). Only USD is taken; any other currency is a 400 naming the line's field.
let h: LlmHarness;
let up: FakeUpstream;

test.before(async () => {
  up = await startFakeUpstream({ name: 'cur', models: [{ id: 'm1' }] });
  h = await startLlmHarness();
  await h.call('POST', '/v1/admin/providers', { name: 'Cur', vendor: 'cur', base_url: up.url });
});
test.after.always(async () => {
  await h?.close();
  await up?.close();
});

const pm = async () => h.service.runtime.db.knex('llm_provider_models').where({ model_public_id: 'm1' }).first();

test.serial('a pricing line in a currency other than USD is a 400 naming its currency, and nothing is stored', async (t) => {
  const { id } = await pm();
  const patch = (lines: unknown[]) => h.call('PATCH', `/v1/admin/models/provider-models/${id}`, { pricing: { lines } });
  for (const currency of ['EUR', 'usd', '']) {
    const res = await patch([
      { amount_micro_usd: 5, unit: 'per_1k_prompt_tokens', currency: 'USD' },
      { amount_micro_usd: 15, unit: 'per_1k_completion_tokens', currency },
    ]);
    t.is(res.status, 400, JSON.stringify(res.body));
    t.like(res.body.error, { type: 'invalid_request_error', param: 'pricing.lines[1].currency' }, currency);
    t.regex(res.body.error.message, /USD/);
  }
  t.deepEqual((await pm()).pricing, { lines: [] }, 'nothing stored');

  const ok = await patch([
    { amount_micro_usd: 5, unit: 'per_1k_prompt_tokens', currency: 'USD' },
    { amount_micro_usd: 15, unit: 'per_1k_completion_tokens' },
  ]);
  t.is(ok.status, 200, JSON.stringify(ok.body));
  t.deepEqual(
    ok.body.pricing.lines.map((l: { currency: string }) => l.currency),
    ['USD', 'USD'],
    'an absent currency is USD',
  );
});
