import test from 'ava';
import { ManualClock, migrateAll } from '../../../services/kit/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// The scheduled pass is claimed with a compare-and-set on when the last one started. A last start
// recorded far ahead of the clock (the clock was set back since, by an hour here) must not stop
// every process from syncing until the clock catches up with it.
let h: LlmHarness;
let fake: FakeUpstream;
const clock = new ManualClock(Date.now());
const HOUR = 3_600_000;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'schedclock', models: [{ id: 'c1' }] });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '25' }, { clock });
  await migrateAll(h.service.runtime.db.knex, providerSyncWorker.migrations);
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test('a last pass recorded an hour ahead of the clock (the clock was set back): the next scheduled pass still runs', async (t) => {
  const created = await h.call('POST', '/v1/admin/providers', { name: 'SchedClock', vendor: 'fake', base_url: fake.url });
  t.is(created.status, 201, JSON.stringify(created.body));
  const knex = h.service.runtime.db.knex;
  await knex('llm_provider_sync_schedule').insert({ name: 'models', last_started_at: clock.now() + HOUR });
  const listed = () => fake.requests.filter((r) => r.path.endsWith('/models')).length;
  const before = listed();
  const worker = await providerSyncWorker.start(h.service.ctx);
  try {
    await waitFor(async () => listed() > before, 30_000, 'a scheduled pass');
    const row = await knex('llm_provider_sync_schedule').where({ name: 'models' }).first();
    t.is(Number(row.last_started_at), clock.now(), 'the pass is recorded at this clock');
    t.is(listed() - before, 1, 'one pass: the clock stands still, so the interval does not pass again');
  } finally {
    await worker.stop();
  }
});
