import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Provider A offers a1..a3 and shared; provider B offers b1, b2 and shared: 7 provider models.
let h: LlmHarness;
let fa: FakeUpstream;
let fb: FakeUpstream;
let A: string;
let B: string;

test.before(async () => {
  fa = await startFakeUpstream({ name: 'a', models: [{ id: 'a1' }, { id: 'a2' }, { id: 'a3' }, { id: 'shared' }] });
  fb = await startFakeUpstream({ name: 'b', models: [{ id: 'b1' }, { id: 'b2' }, { id: 'shared' }] });
  h = await startLlmHarness();
  A = (await h.call('POST', '/v1/admin/providers', { name: 'A', vendor: 'a', base_url: fa.url })).body.id;
  B = (await h.call('POST', '/v1/admin/providers', { name: 'B', vendor: 'b', base_url: fb.url })).body.id;
});
test.after.always(async () => {
  await h?.close();
  await fa?.close();
  await fb?.close();
});

const toggle = (body: unknown) => h.call('POST', '/v1/admin/models/provider-models/bulk-toggle', body);
const active = async () => {
  const rows = await h.service.runtime.db.knex('llm_provider_models').select('provider_id', 'model_public_id', 'active');
  return rows.filter((r: any) => r.active).map((r: any) => `${r.provider_id === A ? 'A' : 'B'}:${r.model_public_id}`).sort();
};

test.serial('the four patterns without provider scope, with exact counts', async (t) => {
  // disable all
  t.deepEqual((await toggle({ enable: false })).body, { updated_count: 7, failed_count: 0, skipped_count: 0, total_checked: 7, failed_models: [] });
  t.deepEqual(await active(), []);
  t.deepEqual((await h.call('GET', '/v1/models', undefined, h.user)).body.data, []);
  // enable all except a1 and b2 (public ids) → 5 updated, 2 skipped
  t.deepEqual((await toggle({ enable: true, except_models: ['a1', 'b2'] })).body, { updated_count: 5, failed_count: 0, skipped_count: 2, total_checked: 7, failed_models: [] });
  t.deepEqual(await active(), ['A:a2', 'A:a3', 'A:shared', 'B:b1', 'B:shared']);
  // enable all → the 2 left are updated, 5 already enabled are skipped
  t.deepEqual((await toggle({ enable: true })).body, { updated_count: 2, failed_count: 0, skipped_count: 5, total_checked: 7, failed_models: [] });
  // disable all except "shared" (both providers' copies) → 5 updated, 2 skipped
  t.deepEqual((await toggle({ enable: false, except_models: ['shared'] })).body, { updated_count: 5, failed_count: 0, skipped_count: 2, total_checked: 7, failed_models: [] });
  t.deepEqual(await active(), ['A:shared', 'B:shared']);
  t.deepEqual((await h.call('GET', '/v1/models', undefined, h.user)).body.data.map((m: any) => m.id), ['shared']);
  await toggle({ enable: true });
});

test.serial('the four patterns scoped to one provider, with exact counts', async (t) => {
  t.deepEqual((await toggle({ enable: false, provider_id: B })).body, { updated_count: 3, failed_count: 0, skipped_count: 0, total_checked: 3, failed_models: [] });
  t.deepEqual(await active(), ['A:a1', 'A:a2', 'A:a3', 'A:shared']);
  // "shared" is still served by A
  t.true((await h.call('GET', '/v1/models', undefined, h.user, { 'x-provider-data': 'true' })).body.data.some((m: any) => m.id === 'shared' && m.provider_id === A));
  t.deepEqual((await toggle({ enable: true, provider_id: B, except_models: ['b1'] })).body, { updated_count: 2, failed_count: 0, skipped_count: 1, total_checked: 3, failed_models: [] });
  t.deepEqual((await toggle({ enable: true, provider_id: B })).body, { updated_count: 1, failed_count: 0, skipped_count: 2, total_checked: 3, failed_models: [] });
  // except by provider-model id
  const pmA1 = await h.service.runtime.db.knex('llm_provider_models').where({ provider_id: A, model_public_id: 'a1' }).first();
  t.deepEqual((await toggle({ enable: false, provider_id: A, except_models: [pmA1.id] })).body, { updated_count: 3, failed_count: 0, skipped_count: 1, total_checked: 4, failed_models: [] });
  t.deepEqual(await active(), ['A:a1', 'B:b1', 'B:b2', 'B:shared']);
  await toggle({ enable: true });
});

test.serial('enabling models of an inactive provider fails for those models; events and validation', async (t) => {
  await h.call('PATCH', `/v1/admin/providers/${B}`, { active: false });
  await toggle({ enable: false, provider_id: B });
  const res = await toggle({ enable: true });
  t.like(res.body, { updated_count: 0, failed_count: 3, skipped_count: 4, total_checked: 7 });
  t.deepEqual([...res.body.failed_models].sort(), ['b1', 'b2', 'shared']);
  await h.call('PATCH', `/v1/admin/providers/${B}`, { active: true });
  t.is((await toggle({ enable: true })).body.updated_count, 3);

  const before = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).count<{ count: number }[]>({ count: '*' });
  await toggle({ enable: false, provider_id: A, except_models: ['a1', 'a2'] });
  const after = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).count<{ count: number }[]>({ count: '*' });
  t.is(Number(after[0]!.count) - Number(before[0]!.count), 2);
  await toggle({ enable: true });

  const empty = await toggle({ enable: true, provider_id: '' });
  t.is(empty.status, 400);
  t.is(empty.body.error.param, 'provider_id');
  const noEnable = await toggle({});
  t.is(noEnable.body.error.param, 'enable');
  t.is((await toggle({ enable: true, provider_id: 'prov_nope' })).status, 404);
});

test.serial('catalog bulk toggle: by catalog ids (id or public id), or all, with exceptions', async (t) => {
  const shared = (await h.call('GET', '/v1/models/catalogs/shared', undefined, h.user)).body;
  const res = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: false, catalog_ids: [shared.id, 'a1'] });
  t.deepEqual(res.body, { updated_count: 3, failed_count: 0, skipped_count: 0, total_checked: 3, failed_models: [] });
  t.deepEqual(await active(), ['A:a2', 'A:a3', 'B:b1', 'B:b2']);
  const all = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: true, catalog_ids: [], except_models: ['a1'] });
  t.deepEqual(all.body, { updated_count: 2, failed_count: 0, skipped_count: 5, total_checked: 7, failed_models: [] });
  const unknown = await h.call('POST', '/v1/admin/models/catalogs/bulk-toggle', { enable: true, catalog_ids: ['no/such'] });
  t.deepEqual(unknown.body, { updated_count: 0, failed_count: 1, skipped_count: 0, total_checked: 1, failed_models: ['no/such'] });
});
