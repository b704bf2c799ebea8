import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

let h: LlmHarness;
let fake: FakeUpstream;
let providerId: string;
const SLASHED = 'meta-llama/Llama-3.1-8B-Instruct';

test.before(async () => {
  fake = await startFakeUpstream({ name: 'cat', models: [{ id: SLASHED, context_length: 4096, description: 'from upstream' }, { id: 'plain' }] });
  // The request log flushes every few milliseconds, so its writes fall inside the hot-path test's
  // calls on every run rather than on a slow one only.
  // The caller's allow-lists (which models it may see) are cached for an hour here, so the hot-path
  // test can show the model list reads them from the cache, never the database, once warm.
  h = await startLlmHarness({ REQUEST_LOG_FLUSH_MS: '5', LLM_SPEND_LIMITS_CACHE_MS: '3600000' });
  const res = await h.call('POST', '/v1/admin/providers', { name: 'Cat', vendor: 'cat', base_url: fake.url });
  providerId = res.body.id;
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test.serial('GET /v1/models lists active models; X-PROVIDER-DATA adds provider fields', async (t) => {
  const plain = await h.call('GET', '/v1/models', undefined, h.user);
  t.is(plain.status, 200);
  t.is(plain.body.object, 'list');
  const entry = plain.body.data.find((m: any) => m.id === SLASHED);
  t.like(entry, { object: 'model', owned_by: 'cat', category: 'llm', category_order_number: 0, model_order_number: 0 });
  t.false('provider_id' in entry);
  // The context window requests are fitted to: the catalog's (from the provider's listing), or null.
  t.is(entry.context_length, 4096);
  t.is(plain.body.data.find((m: any) => m.id === 'plain').context_length, null);
  const rich = await h.call('GET', '/v1/models', undefined, h.user, { 'X-PROVIDER-DATA': 'true' });
  t.like(rich.body.data.find((m: any) => m.id === SLASHED), { provider_id: providerId, provider_name: 'Cat', provider_vendor: 'cat' });
  const off = await h.call('GET', '/v1/models', undefined, h.user, { 'X-PROVIDER-DATA': 'false' });
  t.false('provider_id' in off.body.data[0]);
});

test.serial('catalog entry by public id with slashes; unknown → 404 model_not_found', async (t) => {
  const res = await h.call('GET', `/v1/models/catalogs/${SLASHED}`, undefined, h.user);
  t.is(res.status, 200);
  t.like(res.body, { public_id: SLASHED, status: 'init', active: true, context_length: 4096, description: 'from upstream' });
  t.deepEqual(res.body.tags, []);
  t.is(typeof res.body.created_at, 'number');
  t.truthy(res.body.architecture);
  t.truthy(res.body.supported_parameters);
  const llm = await h.call('GET', `/llm/v1/models/catalogs/${SLASHED}`, undefined, h.user);
  t.is(llm.status, 200);
  const missing = await h.call('GET', '/v1/models/catalogs/nope/nothing', undefined, h.user);
  t.is(missing.status, 404);
  t.is(missing.body.error.code, 'model_not_found');
  const retrieve = await h.call('GET', `/v1/models/${SLASHED}`, undefined, h.user);
  t.is(retrieve.body.id, SLASHED);
  // GET /v1/models/{model} with an unknown id: OpenAI's 404, naming the `model` parameter.
  const unknown = await h.call('GET', '/v1/models/nope/nothing', undefined, h.user);
  t.is(unknown.status, 404);
  t.like(unknown.body.error, { code: 'model_not_found', param: 'model' });
});

test.serial('manual catalog update is protected from synchronisation; unpatched fields still sync', async (t) => {
  const patched = await h.call('PATCH', `/v1/admin/models/catalogs/${SLASHED}`, { description: 'hand written', tags: ['chat'], supports_tools: true });
  t.is(patched.status, 200);
  t.is(patched.body.description, 'hand written');
  t.deepEqual(patched.body.manual_fields, ['description', 'supports_tools', 'tags']);
  const event = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).orderBy('seq', 'desc').first();
  t.is(event.data.model_id, SLASHED);
  t.deepEqual(event.data.changes.description, { old: 'from upstream', new: 'hand written' });

  fake.setModels([{ id: SLASHED, context_length: 16384, description: 'upstream v2' }, { id: 'plain' }, { id: 'fresh/new-model' }]);
  const sync = await h.call('POST', `/v1/admin/providers/${providerId}/sync`);
  t.is(sync.status, 200);
  t.is(sync.body.added, 1);
  const after = await h.call('GET', `/v1/models/catalogs/${SLASHED}`, undefined, h.user);
  t.is(after.body.description, 'hand written');
  t.is(after.body.context_length, 16384);
  t.true(after.body.supports_tools);
  const added = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.added' }).whereRaw("data->>'model_id' = ?", ['fresh/new-model']);
  t.is(added.length, 1);

  // A model that vanishes upstream is deactivated, and comes back when it reappears.
  fake.setModels([{ id: SLASHED, context_length: 16384, description: 'upstream v2' }, { id: 'fresh/new-model' }]);
  const gone = await h.call('POST', `/v1/admin/providers/${providerId}/sync`);
  t.is(gone.body.deactivated, 1);
  t.false((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'plain'));
  fake.setModels([{ id: SLASHED, context_length: 16384, description: 'upstream v2' }, { id: 'fresh/new-model' }, { id: 'plain' }]);
  await h.call('POST', `/v1/admin/providers/${providerId}/sync`);
  t.true((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'plain'));
});

test.serial('catalog patch validation names the field', async (t) => {
  const bad = await h.call('PATCH', `/v1/admin/models/catalogs/${SLASHED}`, { context_length: 'long' });
  t.is(bad.status, 400);
  t.is(bad.body.error.param, 'context_length');
  const tags = await h.call('PATCH', `/v1/admin/models/catalogs/${SLASHED}`, { tags: [1] });
  t.is(tags.body.error.param, 'tags[0]');
});

test.serial('provider model get/patch: pricing, token limits, ordering, instruct model; manual fields survive sync', async (t) => {
  const list = await h.call('GET', `/v1/admin/models/provider-models?provider_id=${providerId}`);
  t.is(list.status, 200);
  const pm = list.body.data.find((m: any) => m.model_public_id === 'plain');
  t.regex(pm.id, /^pmdl_/);
  const got = await h.call('GET', `/v1/admin/models/provider-models/${pm.id}`);
  t.like(got.body, { id: pm.id, provider_id: providerId, model_public_id: 'plain', provider_original_model_id: 'plain', provider_vendor: 'cat', active: true });
  t.deepEqual(got.body.pricing, { lines: [] });

  const patch = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, {
    model_display_name: 'Plain Model',
    model_order_number: -5,
    pricing: { lines: [{ amount_micro_usd: 1500, currency: 'USD', unit: 'per_1k_prompt_tokens' }] },
    token_limits: { context_length: 2048, max_completion_tokens: 512 },
    instruct_model_public_id: SLASHED,
  });
  t.is(patch.status, 200);
  t.like(patch.body, { model_display_name: 'Plain Model', model_order_number: -5, instruct_model_public_id: SLASHED });
  t.deepEqual(patch.body.token_limits, { context_length: 2048, max_completion_tokens: 512 });
  // Ordering reaches the list at once (cache invalidated): -5 puts it first.
  t.is((await h.call('GET', '/v1/models', undefined, h.user)).body.data[0].id, 'plain');
  // The provider model's token limit is the context window the model shows.
  t.like((await h.call('GET', '/v1/models/plain', undefined, h.user)).body, { id: 'plain', object: 'model', context_length: 2048 });

  await h.call('POST', `/v1/admin/providers/${providerId}/sync`);
  t.is((await h.call('GET', `/v1/admin/models/provider-models/${pm.id}`)).body.model_display_name, 'Plain Model');

  const badInstruct = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { instruct_model_public_id: 'no/such' });
  t.is(badInstruct.status, 400);
  t.is(badInstruct.body.error.param, 'instruct_model_public_id');
  const badPricing = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { pricing: { lines: [{ amount_micro_usd: 1, unit: 'per_year' }] } });
  t.is(badPricing.body.error.param, 'pricing.lines[0].unit');
  t.is((await h.call('GET', '/v1/admin/models/provider-models/pmdl_missing')).status, 404);
});

test.serial('the hot path does not query the model tables for model resolution', async (t) => {
  const knex = h.service.runtime.db.knex;
  const queried: string[] = [];
  // Only the tables model resolution would read: the request log's and the usage recorder's timed
  // flushes write their own llm_ tables whenever their timers fire, which is not the request path.
  // The caller's allow-lists (llm_spend_limits) come from admission's cache once it is warm.
  const MODEL_TABLES = /\b(llm_providers|llm_provider_models|llm_model_catalogs|llm_catalog_state|llm_spend_limits)\b/;
  const onQuery = (q: { sql: string }) => void (MODEL_TABLES.test(q.sql) && queried.push(q.sql));
  t.is((await h.call('GET', '/v1/models', undefined, h.user)).status, 200);
  knex.on('query', onQuery);
  try {
    for (let i = 0; i < 5; i++) t.is((await h.call('GET', '/v1/models', undefined, h.user)).status, 200);
    t.is((await h.call('GET', `/v1/models/${SLASHED}`, undefined, h.user)).status, 200);
  } finally {
    knex.off('query', onQuery);
  }
  t.deepEqual(queried, []);
});
