import test from 'ava';
import { syncProvider, type ModelsStore } from '../../../domains/catalog/index.js';
import { modelListClientFor, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// A sync beside an admin's edits. The sync reads the provider's models and the catalog entry, then
// writes what changed upstream; an admin PATCH committed between that read and that write (a name
// or a description set by hand) was judged against the older row and written over. The sync is
// held after its reads here (its store's next call waits for the test), the PATCHes are sent, and
// then the sync goes on.
let h: LlmHarness;
let fake: FakeUpstream;
let upstream: ReturnType<typeof modelListClientFor>;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'race', models: [{ id: 'race/model', name: 'Upstream v1', description: 'upstream v1' }] });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  upstream = modelListClientFor(h.service.runtime.config);
});
test.after.always(async () => {
  await upstream?.close();
  await h?.close();
  await fake?.close();
});

/** Whether a transaction of this test's schema waits for a row of `table` (it holds the row's tuple lock while it waits). */
const waitsOnRow = async (table: string) => {
  const rows = await h.service.runtime.db.knex.raw("select 1 from pg_locks where locktype = 'tuple' and relation = to_regclass(?)", [table]);
  return rows.rows.length > 0;
};

test.serial("a PATCH sent while a sync is between its read and its write is applied after the sync, not written over by it", async (t) => {
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Race', vendor: 'race', base_url: fake.url });
  t.is(registered.status, 201, JSON.stringify(registered.body));
  const providerId = registered.body.id as string;
  const pm = await h.service.runtime.db.knex('llm_provider_models').where({ provider_id: providerId, model_public_id: 'race/model' }).first();

  // Upstream renames and redescribes the model; a sync starts and is held after its reads.
  fake.setModels([{ id: 'race/model', name: 'Upstream v2', description: 'upstream v2' }]);
  const deps = syncDepsFor(h.service.ctx, upstream);
  let held!: () => void;
  const reached = new Promise<void>((resolve) => (held = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const models: ModelsStore = {
    ...deps.models,
    async catalogSources(...args: Parameters<ModelsStore['catalogSources']>) {
      held();
      await released;
      return deps.models.catalogSources(...args);
    },
  };
  const sync = syncProvider({ ...deps, models }, providerId);
  await reached;

  const patches = Promise.all([
    h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { model_display_name: 'Named by hand' }),
    h.call('PATCH', '/v1/admin/models/catalogs/race/model', { description: 'described by hand' }),
  ]);
  // Either the PATCHes are done (nothing held them), or both wait for the sync's rows.
  await Promise.race([patches, waitFor(async () => (await waitsOnRow('llm_provider_models')) && (await waitsOnRow('llm_model_catalogs')), 10_000, 'the PATCHes waiting for the sync')]);
  release();
  await sync;
  const [pmPatch, catalogPatch] = await patches;
  t.is(pmPatch.status, 200, JSON.stringify(pmPatch.body));
  t.is(catalogPatch.status, 200, JSON.stringify(catalogPatch.body));

  const knex = h.service.runtime.db.knex;
  const pmAfter = await knex('llm_provider_models').where({ id: pm.id }).first();
  t.is(pmAfter.model_display_name, 'Named by hand');
  t.true(pmAfter.manual_fields.includes('model_display_name'));
  const catalogAfter = await knex('llm_model_catalogs').where({ public_id: 'race/model' }).first();
  t.is(catalogAfter.description, 'described by hand');
  t.true(catalogAfter.manual_fields.includes('description'));

  // And later syncs leave them alone.
  await syncProvider(deps, providerId);
  t.is((await knex('llm_provider_models').where({ id: pm.id }).first()).model_display_name, 'Named by hand');
  t.is((await knex('llm_model_catalogs').where({ public_id: 'race/model' }).first()).description, 'described by hand');
});

test.serial('POST /v1/admin/providers/sync with a misspelt field is a 400 naming it, never a run over every provider', async (t) => {
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Spelt', vendor: 'race', base_url: fake.url });
  const runs = async () => Number((await h.service.runtime.db.knex('llm_provider_sync_runs').count({ n: '*' }).first())!.n);
  const before = await runs();
  const misspelt = await h.call('POST', '/v1/admin/providers/sync', { providerId: registered.body.id });
  t.is(misspelt.status, 400, JSON.stringify(misspelt.body));
  t.is(misspelt.body.error.param, 'providerId');
  t.is(await runs(), before, 'no run was queued');
  const right = await h.call('POST', '/v1/admin/providers/sync', { provider_id: registered.body.id });
  t.is(right.status, 202);
  t.is(right.body.provider_id, registered.body.id);
});
