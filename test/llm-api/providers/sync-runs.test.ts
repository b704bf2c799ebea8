import test from 'ava';
import { ManualClock } from '../../../services/kit/clock.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// The sync collection: GET /v1/admin/providers/sync lists the recorded runs instead of being
// taken for a provider whose id is "sync". A manual clock gives each run its own second, so
// "newest first" is the order the test made them in.
let h: LlmHarness;
let fake: FakeUpstream;
const clock = new ManualClock();

test.before(async () => {
  fake = await startFakeUpstream({ name: 'runs', models: [{ id: 'r1' }] });
  h = await startLlmHarness({}, { clock });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test.serial('GET /v1/admin/providers/sync lists recent runs newest first, paginated like other lists', async (t) => {
  const empty = await h.call('GET', '/v1/admin/providers/sync');
  t.is(empty.status, 200, JSON.stringify(empty.body));
  t.deepEqual(empty.body, { object: 'list', data: [], has_more: false, total_count: 0 });

  const up = (await h.call('POST', '/v1/admin/providers', { name: 'Up', vendor: 'fake', base_url: fake.url })).body.id;
  const down = (await h.call('POST', '/v1/admin/providers', { name: 'Down', vendor: 'fake', base_url: 'http://127.0.0.1:9/v1' })).body.id;
  fake.setModels([{ id: 'r1' }, { id: 'r2' }]);
  const synced = await h.call('POST', `/v1/admin/providers/${up}/sync`);
  t.is(synced.status, 200, JSON.stringify(synced.body));
  clock.advance(1_000);
  const queued = await h.call('POST', '/v1/admin/providers/sync', { provider_id: up });
  t.is(queued.status, 202, JSON.stringify(queued.body));
  clock.advance(1_000);
  t.is((await h.call('POST', `/v1/admin/providers/${down}/sync`)).status, 502);

  const all = await h.call('GET', '/v1/admin/providers/sync');
  t.is(all.status, 200);
  t.like(all.body, { object: 'list', has_more: false, total_count: 3 });
  const [failed, waiting, done] = all.body.data;
  t.like(failed, { object: 'provider.sync_run', provider_id: down, status: 'failed', providers_failed: 1 });
  t.is(failed.failures[0].provider_id, down);
  t.like(waiting, { id: queued.body.id, provider_id: up, status: 'queued', started_at: null, finished_at: null });
  t.like(done, { id: synced.body.sync_id, provider_id: up, status: 'succeeded', providers_synced: 1, added: 1 });
  t.true(failed.created_at > waiting.created_at && waiting.created_at > done.created_at);
  // Each entry is the same view as the run's own page.
  t.deepEqual((await h.call('GET', `/v1/admin/providers/sync/${done.id}`)).body, done);

  const first = await h.call('GET', '/v1/admin/providers/sync?limit=2');
  t.deepEqual(first.body.data.map((r: any) => r.id), [failed.id, waiting.id]);
  t.like(first.body, { has_more: true, total_count: 3 });
  const second = await h.call('GET', '/v1/admin/providers/sync?limit=2&offset=2');
  t.deepEqual(second.body.data.map((r: any) => r.id), [done.id]);
  t.false(second.body.has_more);

  // The provider routes around it are unchanged.
  t.is((await h.call('GET', `/v1/admin/providers/${up}`)).body.id, up);
  t.is((await h.call('GET', '/v1/admin/providers/prov_nope')).status, 404);
});

test.serial('the sync list refuses a bad page with the field named, and non-admins', async (t) => {
  const bad = await h.call('GET', '/v1/admin/providers/sync?limit=0');
  t.is(bad.status, 400);
  t.is(bad.body.error.param, 'limit');
  const tooFar = await h.call('GET', '/v1/admin/providers/sync?offset=-1');
  t.is(tooFar.body.error.param, 'offset');
  const user = await h.call('GET', '/v1/admin/providers/sync', undefined, h.user);
  t.is(user.status, 403);
  t.is(user.body.error.type, 'permission_error');
});
