import test from 'ava';
import { modelListClientFor, providerSyncWorker, syncAllProviders, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

let h: LlmHarness;
let fake: FakeUpstream;
let stopWorker: () => Promise<void>;
let providerId: string;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'sync', models: [{ id: 's1', name: 'S One' }, { id: 's2' }] });
  // The registry notices changes made by another process (the worker) through the catalog version.
  h = await startLlmHarness({ LLM_CATALOG_POLL_MS: '50', LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  providerId = (await h.call('POST', '/v1/admin/providers', { name: 'Sync', vendor: 'fake', base_url: fake.url })).body.id;
  const worker = await providerSyncWorker.start(h.service.ctx);
  stopWorker = () => worker.stop();
});
test.after.always(async () => {
  await stopWorker?.();
  await h?.close();
  await fake?.close();
});

const modelIds = async () => (await h.call('GET', '/v1/models', undefined, h.user)).body.data.map((m: any) => m.id).sort();

test.serial('on demand: POST /v1/admin/providers/sync → the worker adds new models, deactivates vanished ones; llm-api reloads', async (t) => {
  t.deepEqual(await modelIds(), ['s1', 's2']);
  fake.setModels([{ id: 's1', name: 'S One' }, { id: 's3' }]);
  const req = await h.call('POST', '/v1/admin/providers/sync', {});
  t.is(req.status, 202);
  t.is(req.body.status, 'queued');
  // The recorded run says when the worker is done; the registry then reloads on its catalog poll.
  const run = await waitFor(async () => {
    const view = (await h.call('GET', `/v1/admin/providers/sync/${req.body.id}`)).body;
    return view.status === 'succeeded' || view.status === 'failed' ? view : undefined;
  }, 30_000, 'the queued sync run to finish');
  t.like(run, { status: 'succeeded', providers_synced: 1, added: 1, deactivated: 1 });
  t.deepEqual(await waitFor(async () => {
    const ids = await modelIds();
    return JSON.stringify(ids) === JSON.stringify(['s1', 's3']) && ids;
  }, 30_000, 'llm-api to reload the synchronised catalog'), ['s1', 's3']);
  const knex = h.service.runtime.db.knex;
  t.is((await knex('outbox_events').where({ type: 'model.added' }).whereRaw("data->>'model_id' = 's3'")).length, 1);
  const vanished = await knex('outbox_events').where({ type: 'model.updated' }).whereRaw("data->>'model_id' = 's2'");
  t.deepEqual(vanished.at(-1).data.changes, { active: { old: true, new: false } });
  t.is((await h.call('POST', '/v1/admin/providers/sync', { provider_id: 'prov_nope' })).status, 404);
  t.is((await h.call('POST', '/v1/admin/providers/sync', {}, h.user)).status, 403);
});

test.serial('scheduled run: every active provider; manual fields are never overwritten', async (t) => {
  const pm = (await h.call('GET', `/v1/admin/models/provider-models?provider_id=${providerId}`)).body.data.find((m: any) => m.model_public_id === 's1');
  await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { model_display_name: 'Chosen by admin' });
  fake.setModels([{ id: 's1', name: 'S One renamed', context_length: 1000 }, { id: 's3' }]);
  const upstream = modelListClientFor(h.service.runtime.config);
  t.teardown(() => upstream.close());
  const summary = await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream));
  t.like(summary, { synced: [providerId], failed: [], added: 0, deactivated: 0 });
  t.is(summary.updated, 1, 'the changed context length');
  const after = (await h.call('GET', `/v1/admin/models/provider-models/${pm.id}`)).body;
  t.is(after.model_display_name, 'Chosen by admin');
  t.deepEqual(after.token_limits, { context_length: 1000 });
  const event = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).whereRaw("data->>'provider_model_id' = ?", [pm.id]).orderBy('seq', 'desc').first();
  t.deepEqual(event.data.changes.token_limits, { old: {}, new: { context_length: 1000 } });
  t.false('model_display_name' in event.data.changes);

  // An inactive provider is skipped by the scheduled run.
  await h.call('PATCH', `/v1/admin/providers/${providerId}`, { active: false });
  t.deepEqual(await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream)), { synced: [], failed: [], added: 0, updated: 0, deactivated: 0 });
});
