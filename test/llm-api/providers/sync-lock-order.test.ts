import test from 'ava';
import { syncProvider, type ModelsStore, type SyncDeps } from '../../../domains/catalog/index.js';
import { modelListClientFor, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// Two providers offering the same models, listed in different orders, synchronised at once (the
// admin's inline sync beside the worker's, or two workers). Each sync locks the catalog entries it
// writes until it commits: taken in each list's own order, one sync held X and waited for Y while
// the other held Y and waited for X, and PostgreSQL ended one of them with a deadlock error. The
// syncs are held here right after writing their first catalog entry, then let go together.
let h: LlmHarness;
const fakes: FakeUpstream[] = [];
let upstream: ReturnType<typeof modelListClientFor>;

test.before(async () => {
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  upstream = modelListClientFor(h.service.runtime.config);
});
test.after.always(async () => {
  await upstream?.close();
  await h?.close();
  for (const fake of fakes) await fake.close();
});

async function provider(name: string, ids: string[]) {
  const fake = await startFakeUpstream({ name, models: ids.map((id) => ({ id })) });
  fakes.push(fake);
  const res = await h.call('POST', '/v1/admin/providers', { name, vendor: 'lock', base_url: fake.url });
  if (res.status !== 201) throw new Error(JSON.stringify(res.body));
  return { id: res.body.id as string, fake };
}

/** Sync deps whose store stops at the first provider-model update (its catalog entry written, so locked) until `release`. */
function held(deps: SyncDeps) {
  let reached!: () => void;
  const atGate = new Promise<void>((resolve) => (reached = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let first = true;
  const models: ModelsStore = {
    ...deps.models,
    async updateProviderModel(...args: Parameters<ModelsStore['updateProviderModel']>) {
      if (first) {
        first = false;
        reached();
        await released;
      }
      return deps.models.updateProviderModel(...args);
    },
  };
  return { deps: { ...deps, models }, atGate, release };
}

const waitsOnCatalogRow = async () =>
  (await h.service.runtime.db.knex.raw("select 1 from pg_locks where locktype = 'tuple' and relation = to_regclass('llm_model_catalogs')")).rows.length > 0;

test('two syncs of providers listing the same models in opposite orders both commit (no deadlock)', async (t) => {
  const a = await provider('Lock A', ['lock/x', 'lock/y']);
  const b = await provider('Lock B', ['lock/y', 'lock/x']);
  // Both lists change, so each sync writes its provider's models.
  a.fake.setModels([{ id: 'lock/x', name: 'X by A' }, { id: 'lock/y', name: 'Y by A' }]);
  b.fake.setModels([{ id: 'lock/y', name: 'Y by B' }, { id: 'lock/x', name: 'X by B' }]);

  const base = syncDepsFor(h.service.ctx, upstream);
  const gateA = held(base);
  const gateB = held(base);
  const syncA = syncProvider(gateA.deps, a.id);
  await gateA.atGate;
  const syncB = syncProvider(gateB.deps, b.id);
  // B either holds its own first entry too, or waits for the one A holds.
  await Promise.race([gateB.atGate, waitFor(waitsOnCatalogRow, 10_000, 'sync B waiting for a catalog entry')]);
  gateA.release();
  gateB.release();
  const [resultA, resultB] = await Promise.allSettled([syncA, syncB]);
  t.is(resultA.status, 'fulfilled', resultA.status === 'rejected' ? String(resultA.reason) : '');
  t.is(resultB.status, 'fulfilled', resultB.status === 'rejected' ? String(resultB.reason) : '');
  const names = await h.service.runtime.db.knex('llm_provider_models').whereIn('provider_id', [a.id, b.id]).orderBy(['model_public_id', 'model_display_name']).pluck('model_display_name');
  t.deepEqual(names, ['X by A', 'X by B', 'Y by A', 'Y by B']);
});
