import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Provider A offers a1, a2 and shared; provider B offers b1 and shared.
let h: LlmHarness;
let fa: FakeUpstream;
let fb: FakeUpstream;
let A: string;

test.before(async () => {
  fa = await startFakeUpstream({ name: 'a', models: [{ id: 'a1' }, { id: 'a2' }, { id: 'shared' }] });
  fb = await startFakeUpstream({ name: 'b', models: [{ id: 'b1' }, { id: 'shared' }] });
  h = await startLlmHarness();
  A = (await h.call('POST', '/v1/admin/providers', { name: 'A', vendor: 'a', base_url: fa.url })).body.id;
  await h.call('POST', '/v1/admin/providers', { name: 'B', vendor: 'b', base_url: fb.url });
});
test.after.always(async () => {
  await h?.close();
  await fa?.close();
  await fb?.close();
});

const pmOf = async (publicId: string, providerId = A) =>
  h.service.runtime.db.knex('llm_provider_models').where({ provider_id: providerId, model_public_id: publicId }).first();
const activeIds = async () =>
  (await h.service.runtime.db.knex('llm_provider_models').where({ active: true }).select('id')).map((r: { id: string }) => r.id).sort();

test.serial('the public catalog route hides a model that is not served, as the model list does', async (t) => {
  const a2 = await pmOf('a2');
  t.is((await h.call('GET', '/v1/models/catalogs/a2', undefined, h.user)).status, 200);
  t.is((await h.call('PATCH', `/v1/admin/models/provider-models/${a2.id}`, { active: false })).status, 200);
  t.false((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'a2'));
  const hidden = await h.call('GET', '/v1/models/catalogs/a2', undefined, h.user);
  t.is(hidden.status, 404);
  t.like(hidden.body.error, { type: 'not_found_error', code: 'model_not_found' });
  t.is((await h.call('GET', '/v1/admin/models/catalogs/a2')).status, 200, 'the admin route still shows it');
  await h.call('PATCH', `/v1/admin/models/provider-models/${a2.id}`, { active: true });
  t.is((await h.call('GET', '/v1/models/catalogs/a2', undefined, h.user)).status, 200);

  // A disabled catalog entry: not served by any provider, so not shown either.
  t.is((await h.call('PATCH', '/v1/admin/models/catalogs/a1', { active: false })).status, 200);
  t.is((await h.call('GET', '/v1/models/catalogs/a1', undefined, h.user)).status, 404);
  await h.call('PATCH', '/v1/admin/models/catalogs/a1', { active: true });
  t.is((await h.call('GET', '/v1/models/catalogs/a1', undefined, h.user)).status, 200);
});

test.serial('a provider model cannot name itself as its instruct model', async (t) => {
  const a1 = await pmOf('a1');
  const self = await h.call('PATCH', `/v1/admin/models/provider-models/${a1.id}`, { instruct_model_public_id: 'a1' });
  t.is(self.status, 400, JSON.stringify(self.body));
  t.like(self.body.error, { type: 'invalid_request_error', param: 'instruct_model_public_id' });
  t.is((await pmOf('a1')).instruct_model_public_id, null, 'nothing changed');
  const other = await h.call('PATCH', `/v1/admin/models/provider-models/${a1.id}`, { instruct_model_public_id: 'a2' });
  t.is(other.status, 200);
  t.is(other.body.instruct_model_public_id, 'a2');
  t.is((await h.call('PATCH', `/v1/admin/models/provider-models/${a1.id}`, { instruct_model_public_id: null })).body.instruct_model_public_id, null);
});

test.serial('bulk toggle: an except_models entry that matches no model is a 400 naming it, and nothing changes', async (t) => {
  const before = await activeIds();
  const typo = await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: false, except_models: ['a1', 'shraed'] });
  t.is(typo.status, 400, JSON.stringify(typo.body));
  t.like(typo.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'except_models[1]' });
  t.regex(typo.body.error.message, /shraed/);
  t.deepEqual(await activeIds(), before, 'no model was disabled');
  const catalogs = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: false, except_models: ['nope'] });
  t.like(catalogs.body.error, { param: 'except_models[0]' });
  t.deepEqual(await activeIds(), before);

  // Known ids are fine, duplicated, and outside the provider scope too (b1 is B's).
  const scoped = await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', {
    enable: false,
    provider_id: A,
    except_models: ['a1', 'a1', 'b1', (await pmOf('a2')).id],
  });
  t.deepEqual(scoped.body, { updated_count: 1, failed_count: 0, skipped_count: 2, total_checked: 3, failed_models: [] });
  t.false((await pmOf('shared')).active);
  await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: true });
  t.deepEqual(await activeIds(), before);
});

test.serial('catalog bulk toggle: a catalog named twice (or by id and public id) counts once', async (t) => {
  const a1 = (await h.call('GET', '/v1/admin/models/catalogs/a1')).body;
  const res = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: false, catalog_ids: ['a1', a1.id, 'a1', 'no/such', 'no/such'] });
  t.deepEqual(res.body, { updated_count: 1, failed_count: 1, skipped_count: 0, total_checked: 2, failed_models: ['no/such'] });
  await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: true, catalog_ids: ['a1'] });
  t.true((await pmOf('a1')).active);
});

test.serial('pricing: two lines pricing the same thing are a 400 naming the second (cost would add both)', async (t) => {
  const a1 = await pmOf('a1');
  const patch = (lines: unknown[]) => h.call('PATCH', `/v1/admin/models/provider-models/${a1.id}`, { pricing: { lines } });
  const twice = await patch([
    { amount_micro_usd: 100, unit: 'per_request' },
    { amount_micro_usd: 5, unit: 'per_1k_prompt_tokens' },
    { amount_micro_usd: 100, unit: 'per_request' },
  ]);
  t.is(twice.status, 400, JSON.stringify(twice.body));
  t.is(twice.body.error.param, 'pricing.lines[2].unit');
  const perK = await patch([
    { amount_micro_usd: 5, unit: 'per_1k_prompt_tokens' },
    { amount_micro_usd: 5000, unit: 'per_1m_prompt_tokens' },
  ]);
  t.is(perK.body.error.param, 'pricing.lines[1].unit');
  t.deepEqual((await pmOf('a1')).pricing, { lines: [] }, 'nothing stored');
  const cachedTwice = await patch([
    { amount_micro_usd: 1, unit: 'per_1k_cached_prompt_tokens' },
    { amount_micro_usd: 1000, unit: 'per_1m_cached_prompt_tokens' },
  ]);
  t.is(cachedTwice.body.error.param, 'pricing.lines[1].unit');
  const ok = await patch([
    { amount_micro_usd: 5, unit: 'per_1k_prompt_tokens' },
    { amount_micro_usd: 15, unit: 'per_1k_completion_tokens' },
    { amount_micro_usd: 1, unit: 'per_1k_cached_prompt_tokens' },
    { amount_micro_usd: 1, unit: 'per_request' },
  ]);
  t.is(ok.status, 200, JSON.stringify(ok.body));
  t.is(ok.body.pricing.lines.length, 4);
});

test.serial('bulk enable: a model whose catalog entry is disabled fails (it would stay unavailable), as with an inactive provider', async (t) => {
  const a1 = await pmOf('a1');
  await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: false, provider_id: A });
  t.is((await h.call('PATCH', '/v1/admin/models/catalogs/a1', { active: false })).status, 200);
  const res = await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: true, provider_id: A });
  t.deepEqual(res.body, { updated_count: 2, failed_count: 1, skipped_count: 0, total_checked: 3, failed_models: ['a1'] });
  t.false((await pmOf('a1')).active);
  const byCatalog = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: true, catalog_ids: [a1.model_catalog_id] });
  t.deepEqual(byCatalog.body, { updated_count: 0, failed_count: 1, skipped_count: 0, total_checked: 1, failed_models: ['a1'] });
  // Disabling is never refused; once the entry is active again, enabling works.
  await h.call('PATCH', '/v1/admin/models/catalogs/a1', { active: true });
  t.like((await h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: true })).body, { updated_count: 1, failed_count: 0 });
  t.true((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'a1'));
});
