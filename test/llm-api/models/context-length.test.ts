import test from 'ava';
import { contextLengthOf, type ResolvedModel } from '../../../services/llm-api/models/registry.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A model's context window (`context_length` of GET /v1/models, and what a conversation's history
// is trimmed to) is a whole number of tokens, at least 1. A provider saying 0 ("unknown", as some
// servers do) or a fraction is not taken at its word, and an admin cannot set either.
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({
    name: 'ctx',
    models: [
      { id: 'ctx/zero', context_length: 0 },
      { id: 'ctx/fallthrough', context_length: 0, max_model_len: 8192 },
      { id: 'ctx/fraction', context_length: 4096.7, top_provider: { max_completion_tokens: 0 } },
      { id: 'ctx/plain', context_length: 32768 },
    ],
  });
  h = await startLlmHarness();
  const res = await h.call('POST', '/v1/admin/providers', { name: 'Ctx', vendor: 'ctx', base_url: fake.url });
  if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(res.body)}`);
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const listed = async () => {
  const res = await h.call('GET', '/v1/models', undefined, h.user);
  return Object.fromEntries(res.body.data.map((m: { id: string; context_length: number | null }) => [m.id, m.context_length]));
};

test.serial("a provider's context_length of 0 is unknown (the next field that says one counts), a fraction is rounded down", async (t) => {
  t.deepEqual(await listed(), { 'ctx/zero': null, 'ctx/fallthrough': 8192, 'ctx/fraction': 4096, 'ctx/plain': 32768 });
  const pms = await h.service.runtime.db.knex('llm_provider_models').whereIn('model_public_id', ['ctx/zero', 'ctx/fraction']).orderBy('model_public_id');
  t.deepEqual(pms.map((pm: { token_limits: unknown }) => pm.token_limits), [{ context_length: 4096 }, {}]);
  const catalog = await h.service.runtime.db.knex('llm_model_catalogs').where({ public_id: 'ctx/zero' }).first();
  t.is(catalog.context_length, null);
});

test.serial('an admin context_length or token limit of 0 or a fraction is a 400 naming the field', async (t) => {
  for (const value of [0, 1.5]) {
    const res = await h.call('PATCH', '/v1/admin/models/catalogs/ctx/plain', { context_length: value });
    t.is(res.status, 400, String(value));
    t.is(res.body.error.param, 'context_length');
  }
  const pm = await h.service.runtime.db.knex('llm_provider_models').where({ model_public_id: 'ctx/plain' }).first();
  for (const [field, value] of [['context_length', 0], ['max_completion_tokens', 0], ['context_length', 100.5]] as const) {
    const res = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { [field]: value } });
    t.is(res.status, 400, `${field} ${value}`);
    t.is(res.body.error.param, `token_limits.${field}`);
  }
  t.is((await listed())['ctx/plain'], 32768, 'nothing changed');
  const ok = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { context_length: 16384, max_completion_tokens: 1 } });
  t.is(ok.status, 200);
  t.is((await listed())['ctx/plain'], 16384);
});

test('a 0 stored before (by an older synchronisation) is no context window: the next source counts, else none', (t) => {
  const model = (pmLimit: number | undefined, catalogLimit: number | null) =>
    ({
      publicId: 'm',
      catalog: { context_length: catalogLimit },
      candidates: [{ pm: { token_limits: pmLimit === undefined ? {} : { context_length: pmLimit } } }],
    }) as unknown as ResolvedModel;
  t.is(contextLengthOf(model(0, 4096)), 4096);
  t.is(contextLengthOf(model(0, 0)), null);
  t.is(contextLengthOf(model(undefined, 0)), null);
  t.is(contextLengthOf(model(2048, 4096)), 2048);
  t.is(contextLengthOf(model(undefined, null)), null);
});
