import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// Two providers offering the same new model, registered at once: the second sync's catalog insert
// waits for the first one's transaction and then meets the unique public id. The test holds that
// first transaction itself (a catalog entry inserted and not yet committed), so the race happens
// every time rather than by chance.

let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'racer', models: [{ id: 'race/shared-1' }, { id: 'race/own-1' }] });
  h = await startLlmHarness();
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test('a catalog entry created by a concurrent transaction is used, not a 500', async (t) => {
  const knex = h.service.runtime.db.knex;
  const now = Math.floor(Date.now() / 1000);
  const trx = await knex.transaction();
  let registration: Promise<{ status: number; body: any }> | undefined;
  try {
    await trx('llm_model_catalogs').insert({
      id: 'cmod_race_other', public_id: 'race/shared-1', model_display_name: 'race/shared-1', status: 'init', active: true,
      tags: JSON.stringify([]), extras: JSON.stringify({}), manual_fields: JSON.stringify([]), last_synced_at: now, created_at: now, updated_at: now,
    });
    registration = h.call('POST', '/v1/admin/providers', { name: 'Racer', vendor: 'fake', base_url: fake.url });
    // The registration's insert of the same public id is now waiting on this transaction's lock.
    await waitFor(async () => {
      const rows = await knex.raw(
        `select 1 from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%insert into "llm_model_catalogs"%'`,
      );
      return rows.rows.length > 0;
    }, 20_000, 'the registration waiting on the catalog insert');
    await trx.commit();
  } catch (error) {
    await trx.rollback().catch(() => undefined);
    throw error;
  }
  const res = await registration!;
  t.is(res.status, 201, JSON.stringify(res.body));
  t.deepEqual(res.body.models.map((m: any) => m.id).sort(), ['race/own-1', 'race/shared-1']);
  t.is(res.body.sync_error, null);
  const pm = await knex('llm_provider_models').where({ provider_id: res.body.id, model_public_id: 'race/shared-1' }).first();
  t.is(pm.model_catalog_id, 'cmod_race_other');
  const list = await h.call('GET', `/v1/admin/providers/${res.body.id}`);
  t.is(list.body.model_count, 2);
});
