import test from 'ava';
import { modelListClientFor, syncAllProviders, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Synchronisation reaches a steady state: passes over an unchanged provider list emit no
// model.updated, whatever the order of the keys a provider sends or how many providers offer the
// same model; a bad entry in a provider's list is skipped and named, the rest is synchronised.
let h: LlmHarness;
let upstream: ReturnType<typeof modelListClientFor>;
const fakes: FakeUpstream[] = [];

test.before(async () => {
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  upstream = modelListClientFor(h.service.runtime.config);
});
test.after.always(async () => {
  await upstream?.close();
  await h?.close();
  for (const fake of fakes) await fake.close();
});

async function fakeWith(name: string, models: unknown[]) {
  const fake = await startFakeUpstream({ name, models: models as any });
  fakes.push(fake);
  return fake;
}

const pass = (providerId?: string) => syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), providerId);

async function updatedEventsFor(modelId: string) {
  return h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).whereRaw("data->>'model_id' = ?", [modelId]).orderBy('seq');
}

test.serial('architecture keys in an order jsonb does not keep: no model.updated on later passes', async (t) => {
  // OpenRouter's order; jsonb hands the object back with its keys sorted by length, then bytes.
  const model = {
    id: 'order/model',
    name: 'Order Model',
    context_length: 8192,
    architecture: { modality: 'text+image->text', input_modalities: ['text', 'image'], output_modalities: ['text'], tokenizer: 'Other', instruct_type: null },
  };
  const fake = await fakeWith('order', [model]);
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Order', vendor: 'fake', base_url: fake.url });
  t.is(registered.status, 201);
  for (let i = 0; i < 3; i++) {
    const summary = await pass(registered.body.id);
    t.deepEqual(summary.failed, []);
    t.is(summary.updated, 0, `pass ${i}`);
  }
  t.deepEqual(await updatedEventsFor('order/model'), []);
  // A real change is still one.
  fake.setModels([{ ...model, architecture: { ...model.architecture, tokenizer: 'GPT' } }] as any);
  t.is((await pass(registered.body.id)).updated, 1);
  const [event] = await updatedEventsFor('order/model');
  t.like(event.data.changes.architecture, { old: { tokenizer: 'Other' }, new: { tokenizer: 'GPT' } });
  t.is((await pass(registered.body.id)).updated, 0);
  t.is((await updatedEventsFor('order/model')).length, 1);
});

test.serial('two providers offering one model with different metadata: the first registered one describes it, passes are quiet', async (t) => {
  const a = await fakeWith('shared-a', [{ id: 'shared/model', name: 'From A', max_model_len: 8192 }]);
  const b = await fakeWith('shared-b', [{ id: 'shared/model', name: 'From B', max_model_len: 32768 }]);
  const pa = await h.call('POST', '/v1/admin/providers', { name: 'Shared A', vendor: 'fake', base_url: a.url });
  const pb = await h.call('POST', '/v1/admin/providers', { name: 'Shared B', vendor: 'fake', base_url: b.url });
  t.is(pa.status, 201);
  t.is(pb.status, 201);
  const catalog = () => h.service.runtime.db.knex('llm_model_catalogs').where({ public_id: 'shared/model' }).first();
  t.like(await catalog(), { model_display_name: 'From A', context_length: 8192 });
  for (let i = 0; i < 3; i++) {
    await pass(pa.body.id);
    await pass(pb.body.id);
  }
  t.deepEqual(await updatedEventsFor('shared/model'), [], 'no flip-flop between the providers');
  t.like(await catalog(), { model_display_name: 'From A', context_length: 8192 });
  // Each provider model keeps its own provider's limits.
  const pms = await h.service.runtime.db.knex('llm_provider_models').where({ model_public_id: 'shared/model' });
  t.deepEqual(Object.fromEntries(pms.map((pm: any) => [pm.provider_id, pm.token_limits.context_length])), { [pa.body.id]: 8192, [pb.body.id]: 32768 });

  // A's model vanishes: B now describes the entry, once; then quiet again.
  a.setModels([]);
  await pass(pa.body.id);
  const before = (await updatedEventsFor('shared/model')).length;
  const takeover = await pass(pb.body.id);
  t.is(takeover.updated, 1, 'the catalog change is counted');
  const events = (await updatedEventsFor('shared/model')).slice(before);
  t.is(events.length, 1);
  t.deepEqual(events[0].data.changes.context_length, { old: 8192, new: 32768 });
  t.like(await catalog(), { model_display_name: 'From B', context_length: 32768 });
  const after = (await updatedEventsFor('shared/model')).length;
  for (let i = 0; i < 2; i++) {
    await pass(pa.body.id);
    await pass(pb.body.id);
  }
  t.is((await updatedEventsFor('shared/model')).length, after);
});

test.serial('a malformed entry is skipped and named, never with SQL; the provider\'s other models are synchronised', async (t) => {
  const fake = await fakeWith('bad-entries', [
    { id: 'bad/ok' },
    { id: 'bad/float-created', created: 1716249600.5 },
    { id: 'bad/long-name', name: 'n'.repeat(301) },
    { id: 'bad/nul', description: 'a\u0000b' },
    { id: 'bad/owner', owned_by: { org: 'x' } },
    { id: 'bad/modalities', architecture: { input_modalities: 7 } },
    { name: 'no id' },
    { id: '../../providers/prov_x' },
    { id: 'bad/./dot' },
  ]);
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Bad entries', vendor: 'fake', base_url: fake.url });
  t.is(registered.status, 201);
  t.is(registered.body.sync_error, null);
  t.deepEqual(registered.body.models.map((m: any) => m.id).sort(), ['bad/float-created', 'bad/modalities', 'bad/ok']);
  // A fractional created is rounded down, not a failure.
  t.is(registered.body.models.find((m: any) => m.id === 'bad/float-created').created, 1716249600);
  const error: string = registered.body.last_sync_error;
  t.regex(error, /^6 model entries skipped: /);
  t.regex(error, /model 'bad\/long-name' skipped: name must be a string of at most 300 characters/);
  t.regex(error, /model 'bad\/nul' skipped: description/);
  t.regex(error, /model 'bad\/owner' skipped: owned_by/);
  t.regex(error, /the entry at index 6 has no usable id/);
  t.regex(error, /the entry at index 7 has no usable id \(it has a "\." or "\.\." path segment\)/);
  t.regex(error, /; and 1 more$/, 'the list is cut after five');
  t.false(registered.body.models.some((m: any) => m.id.includes('./')), 'no id with a dot segment is synchronised');
  t.notRegex(error, /insert into|llm_provider_models|llm_model_catalogs/i);

  // Later passes: the same, through the worker's summary; once fixed upstream, the entry syncs
  // and the provider's error clears.
  const summary = await pass(registered.body.id);
  t.deepEqual(summary.synced, [registered.body.id]);
  t.deepEqual(summary.failed, []);
  fake.setModels([{ id: 'bad/ok' }, { id: 'bad/float-created', created: 1716249600.5 }, { id: 'bad/long-name', name: 'Long name, fixed' }] as any);
  const fixed = await pass(registered.body.id);
  t.is(fixed.added, 1);
  const view = await h.call('GET', `/v1/admin/providers/${registered.body.id}`);
  t.is(view.body.last_sync_error, null);

  // An entry that turns bad keeps its model as it was: not deactivated as vanished.
  fake.setModels([{ id: 'bad/ok' }, { id: 'bad/float-created', created: 1716249600.5 }, { id: 'bad/long-name', name: 'x'.repeat(400) }] as any);
  const again = await pass(registered.body.id);
  t.is(again.deactivated, 0);
  const pm = await h.service.runtime.db.knex('llm_provider_models').where({ provider_id: registered.body.id, model_public_id: 'bad/long-name' }).first();
  t.like(pm, { active: true, model_display_name: 'Long name, fixed' });
  t.regex((await h.call('GET', `/v1/admin/providers/${registered.body.id}`)).body.last_sync_error, /^1 model entry skipped: model 'bad\/long-name'/);
});
