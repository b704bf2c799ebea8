import test from 'ava';
import OpenAI, { APIError, BadRequestError, ConflictError, NotFoundError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// Provider administration through the edge with the official SDK: DELETE with and without force
// (what "referenced" means: an enabled provider model), the name free again afterwards, and the
// status of on-demand sync runs run by the provider-sync worker.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fake: FakeUpstream;
let locked: FakeUpstream;
let admin: OpenAI;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'deletable', models: [{ id: 'del/one' }, { id: 'del/two' }] });
  locked = await startFakeUpstream({ name: 'locked', apiKey: 'sk-the-right-key', models: [{ id: 'locked/one' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_PROVIDER_SYNC_INTERVAL_MS: '0' } });
  admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
  await locked?.close();
});

const register = (name: string, upstream = fake, extra: Record<string, unknown> = {}) =>
  admin.post('/admin/providers', { body: { name, vendor: 'fake', base_url: upstream.url, ...extra } }) as Promise<any>;
const ask = (model: string) => admin.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
const modelIds = async () => ((await admin.models.list()).data.map((m) => m.id)).sort();

test.serial('DELETE refuses with 409 while models are enabled, and succeeds once they are disabled; the name is free again', async (t) => {
  const created = await register('Deletable');
  t.is((await ask('del/one')).choices[0]!.finish_reason, 'stop');

  const refused = await t.throwsAsync(admin.delete(`/admin/providers/${created.id}`), { instanceOf: ConflictError });
  t.is((refused as APIError).code, 'provider_in_use');
  t.is((refused as APIError).param, 'force');
  t.regex((refused as APIError).message, /still serves 2 enabled model\(s\): del\/one, del\/two/);
  // Nothing changed: the provider and its models still answer.
  t.like(await admin.get(`/admin/providers/${created.id}`), { id: created.id, model_active_count: 2 });
  t.is((await ask('del/two')).choices[0]!.finish_reason, 'stop');

  // Disabling the provider's models (bulk toggle scoped to it) removes the references.
  await admin.post('/admin/models/provider-models/bulk-toggle', { body: { enable: false, provider_id: created.id } });
  const deleted: any = await admin.delete(`/admin/providers/${created.id}`);
  t.deepEqual(deleted, { id: created.id, object: 'provider.deleted', deleted: true, models_removed: 2 });
  await t.throwsAsync(admin.get(`/admin/providers/${created.id}`), { instanceOf: NotFoundError });
  const left = await p.runtime.db.knex('llm_provider_models').where({ provider_id: created.id });
  t.is(left.length, 0, 'its provider models are gone');

  // The name can be registered again, and its models serve again.
  const again = await register('deletable');
  t.not(again.id, created.id);
  t.deepEqual(again.models.map((m: any) => m.id).sort(), ['del/one', 'del/two']);
  t.is((await ask('del/one')).choices[0]!.finish_reason, 'stop');
  await admin.delete(`/admin/providers/${again.id}`, { query: { force: 'true' } });
});

test.serial('DELETE ?force=true removes the provider with its enabled models, announces each as model.updated, keeps the catalog', async (t) => {
  const created = await register('Forced');
  t.true((await modelIds()).includes('del/one'));
  const deleted: any = await admin.delete(`/admin/providers/${created.id}`, { query: { force: 'true' } });
  t.like(deleted, { id: created.id, deleted: true, models_removed: 2 });

  // The models are gone for clients at once (this process reloaded its registry).
  t.false((await modelIds()).includes('del/one'));
  const gone = await t.throwsAsync(ask('del/one'), { instanceOf: NotFoundError });
  t.is((gone as APIError).code, 'model_not_found');
  const admins: any = await admin.get('/admin/providers', { query: { limit: 100 } });
  t.false(admins.data.some((row: any) => row.id === created.id));

  const events = await p.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).whereRaw("data->>'provider_id' = ?", [created.id]);
  t.deepEqual(events.map((e: any) => e.data.model_id).sort(), ['del/one', 'del/two']);
  for (const e of events) t.like(e.data, { reason: 'provider_deleted', changes: { active: { old: true, new: false } } });
  // Catalog entries (the curated public ids) stay for a later provider of the same models.
  t.truthy(await p.runtime.db.knex('llm_model_catalogs').where({ public_id: 'del/one' }).first());

  t.like(await register('Forced'), { name: 'Forced' });
});

test.serial('DELETE of an unknown provider is a 404; a bad force value is a 400 naming it; non-admins get 403', async (t) => {
  await t.throwsAsync(admin.delete('/admin/providers/prov_missing'), { instanceOf: NotFoundError });
  const created = await register('Strict', fake);
  const bad = await t.throwsAsync(admin.delete(`/admin/providers/${created.id}`, { query: { force: 'yes' } }), { instanceOf: APIError });
  t.is((bad as APIError).status, 400);
  t.is((bad as APIError).param, 'force');
  const login = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string };
  const guest = await fetch(`${p.url}/v1/admin/providers/${created.id}?force=true`, { method: 'DELETE', headers: { authorization: `Bearer ${login.access_token}` } });
  t.is(guest.status, 403);
  t.truthy(await admin.get(`/admin/providers/${created.id}`));
  await admin.delete(`/admin/providers/${created.id}`, { query: { force: 'true' } });
});

const runOf = (id: string) => admin.get(`/admin/providers/sync/${id}`) as Promise<any>;
const finished = (id: string) => waitFor(async () => {
  const run = await runOf(id);
  return run.status === 'succeeded' || run.status === 'failed' ? run : undefined;
}, 30_000, `sync run ${id} finished`);

test.serial('a provider id that is not one string is a 400, never read as "every provider"', async (t) => {
  const runs = async () => ((await admin.get('/admin/providers/sync')) as any).data.length;
  const before = await runs();
  const sync = await t.throwsAsync(admin.post('/admin/providers/sync', { body: { provider_id: 5 } }), { instanceOf: BadRequestError });
  t.is((sync as any).param, 'provider_id');
  t.is(await runs(), before, 'no sync run was queued');
  const listed = await fetch(`${p.url}/v1/admin/models/provider-models?provider_id=a&provider_id=b`, { headers: { 'X-API-Key': ADMIN_KEY } });
  t.is(listed.status, 400);
  t.is(((await listed.json()) as any).error.param, 'provider_id');
});

test.serial('an on-demand sync returns an id whose run goes from queued to succeeded with its counts', async (t) => {
  const created = await register('Synced');
  fake.setModels([{ id: 'del/one' }, { id: 'del/three' }]);
  const requested: any = await admin.post('/admin/providers/sync', { body: { provider_id: created.id } });
  t.like(requested, { object: 'provider.sync_request', provider_id: created.id, status: 'queued' });
  t.regex(requested.id, /^psync_/);
  const queued = await runOf(requested.id);
  t.true(['queued', 'running', 'succeeded'].includes(queued.status));
  t.like(queued, { id: requested.id, object: 'provider.sync_run', provider_id: created.id });

  const run = await finished(requested.id);
  t.like(run, { status: 'succeeded', providers_synced: 1, providers_failed: 0, added: 1, deactivated: 1, error: null, failures: [] });
  t.true(run.started_at >= run.created_at && run.finished_at >= run.started_at);

  // The synchronous sync of one provider is recorded the same way.
  const now: any = await admin.post(`/admin/providers/${created.id}/sync`);
  t.regex(now.sync_id, /^psync_/);
  t.like(await runOf(now.sync_id), { status: 'succeeded', provider_id: created.id, providers_synced: 1, added: 0 });
  fake.setModels([{ id: 'del/one' }, { id: 'del/two' }]);
  await admin.delete(`/admin/providers/${created.id}`, { query: { force: 'true' } });
});

test.serial('a sync that cannot read the provider ends failed with the error; an unknown run id is a 404', async (t) => {
  const created = await register('Locked', locked, { api_key: 'sk-the-wrong-key' });
  t.truthy(created.sync_error);
  const requested: any = await admin.post('/admin/providers/sync', { body: { provider_id: created.id } });
  const run = await finished(requested.id);
  t.like(run, { status: 'failed', providers_synced: 0, providers_failed: 1 });
  t.regex(run.error, new RegExp(`^${created.id}: model sync failed`));
  t.is(run.failures[0].provider_id, created.id);
  t.false(JSON.stringify(run).includes('sk-the-wrong-key'));
  await t.throwsAsync(runOf('psync_nope'), { instanceOf: NotFoundError });
});
