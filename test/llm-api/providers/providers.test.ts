import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

let h: LlmHarness;
let fake: FakeUpstream;
const SECRET_KEY = 'sk-upstream-secret-value-1234';

test.before(async () => {
  fake = await startFakeUpstream({
    name: 'alpha',
    apiKey: SECRET_KEY,
    models: [
      { id: 'alpha/chat-1', owned_by: 'alpha-lab', context_length: 8192, supported_parameters: ['tools', 'reasoning'] },
      { id: 'alpha/chat-2' },
    ],
  });
  h = await startLlmHarness();
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test.serial('register: syncs models from GET {base_url}/models, returns them, never returns the api key', async (t) => {
  const res = await h.call('POST', '/v1/admin/providers', { name: 'Alpha', vendor: 'alpha', base_url: fake.url, api_key: SECRET_KEY, metadata: { team: 'x' } });
  t.is(res.status, 201);
  t.regex(res.body.id, /^prov_/);
  t.is(res.body.category, 'llm');
  t.is(res.body.active, true);
  t.is(res.body.base_url, fake.url);
  t.deepEqual(res.body.endpoints, [{ url: fake.url, enabled: true, healthy: true, priority: 0, weight: 1 }]);
  t.deepEqual(res.body.models.map((m: any) => m.id).sort(), ['alpha/chat-1', 'alpha/chat-2']);
  const m1 = res.body.models.find((m: any) => m.id === 'alpha/chat-1');
  t.like(m1, { object: 'model', owned_by: 'alpha-lab', category: 'llm', model_display_name: 'alpha/chat-1' });
  t.is(typeof m1.created, 'number');
  t.false(JSON.stringify(res.body).includes(SECRET_KEY));
  t.false('api_key' in res.body);
  // The fake demanded the key: the sync used it.
  t.is(fake.requests.find((r) => r.path === '/v1/models')?.headers.authorization, `Bearer ${SECRET_KEY}`);

  // At rest: sealed, not in clear.
  const row = await h.service.runtime.db.knex('llm_providers').where({ id: res.body.id }).first();
  t.truthy(row.api_key_sealed);
  t.false(String(row.api_key_sealed).includes(SECRET_KEY));
  t.regex(row.api_key_sealed, /^v1\./);

  // model.added events, in the outbox with the change.
  const events = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.added' });
  const ids = events.map((e: any) => e.data.model_id).sort();
  t.deepEqual(ids, ['alpha/chat-1', 'alpha/chat-2']);
  const e1 = events.find((e: any) => e.data.model_id === 'alpha/chat-1')!;
  t.is(e1.data.provider, 'Alpha');
  t.true(e1.data.capabilities.includes('tools'));
  t.true(e1.data.capabilities.includes('reasoning'));
  t.regex(e1.data.added_at, /^\d{4}-\d\d-\d\dT.*Z$/);
});

test.serial('list, get and patch providers; the key is never returned; duplicate names are 409', async (t) => {
  const list = await h.call('GET', '/v1/admin/providers');
  t.is(list.status, 200);
  t.is(list.body.object, 'list');
  const alpha = list.body.data.find((p: any) => p.name === 'Alpha');
  t.like(alpha, { model_count: 2, model_active_count: 2, api_key_configured: true });
  t.false(JSON.stringify(list.body).includes(SECRET_KEY));

  const dup = await h.call('POST', '/v1/admin/providers', { name: 'alpha', vendor: 'alpha', base_url: fake.url });
  t.is(dup.status, 409);
  t.is(dup.body.error.param, 'name');

  const patched = await h.call('PATCH', `/v1/admin/providers/${alpha.id}`, {
    metadata: { team: 'y' },
    api_key: 'sk-rotated-1234567',
    endpoints: [{ url: fake.url, priority: 0, weight: 2 }],
  });
  t.is(patched.status, 200);
  t.deepEqual(patched.body.metadata, { team: 'y' });
  t.deepEqual(patched.body.endpoints, [{ url: fake.url, enabled: true, healthy: true, priority: 0, weight: 2 }]);
  t.false(JSON.stringify(patched.body).includes('sk-rotated'));
  const updated = await h.service.runtime.db.knex('outbox_events').where({ type: 'model.updated' }).orderBy('seq', 'desc').first();
  t.deepEqual(updated.data.changes.api_key, { old: '[set]', new: '[set]' });
  t.deepEqual(updated.data.changes.metadata, { old: { team: 'x' }, new: { team: 'y' } });
  // Restore the right key for the other tests.
  t.is((await h.call('PATCH', `/v1/admin/providers/${alpha.id}`, { api_key: SECRET_KEY })).status, 200);

  const got = await h.call('GET', `/v1/admin/providers/${alpha.id}`);
  t.is(got.status, 200);
  t.is(got.body.id, alpha.id);
  t.is((await h.call('GET', '/v1/admin/providers/prov_missing')).status, 404);
});

test.serial('validation: name/vendor required, category enum, a base URL is needed; unknown fields refused', async (t) => {
  const missing = await h.call('POST', '/v1/admin/providers', { vendor: 'x', base_url: fake.url });
  t.is(missing.status, 400);
  t.is(missing.body.error.param, 'name');
  const category = await h.call('POST', '/v1/admin/providers', { name: 'c', vendor: 'x', base_url: fake.url, category: 'video' });
  t.is(category.body.error.param, 'category');
  const noUrl = await h.call('POST', '/v1/admin/providers', { name: 'c', vendor: 'x' });
  t.is(noUrl.status, 400);
  t.is(noUrl.body.error.param, 'base_url');
  const badEndpoint = await h.call('POST', '/v1/admin/providers', { name: 'c', vendor: 'x', endpoints: [{ url: 'ftp://x' }] });
  t.is(badEndpoint.body.error.param, 'endpoints[0].url');
  const unknown = await h.call('POST', '/v1/admin/providers', { name: 'c', vendor: 'x', base_url: fake.url, colour: 'red' });
  t.is(unknown.status, 400);
});

test.serial('a provider that cannot be reached is registered with sync_error and no models; url works as base_url', async (t) => {
  const res = await h.call('POST', '/v1/admin/providers', { name: 'Down', vendor: 'down', url: 'http://127.0.0.1:9/v1' });
  t.is(res.status, 201);
  t.deepEqual(res.body.models, []);
  t.truthy(res.body.sync_error);
  t.is(res.body.base_url, 'http://127.0.0.1:9/v1');
  const sync = await h.call('POST', `/v1/admin/providers/${res.body.id}/sync`);
  t.is(sync.status, 502);
});

test.serial('admin endpoints answer 403 permission_error to non-admins; public provider list hides URLs and metadata', async (t) => {
  for (const [method, path] of [
    ['GET', '/v1/admin/providers'],
    ['POST', '/v1/admin/providers'],
    ['PATCH', '/v1/admin/providers/prov_x'],
    ['POST', '/v1/admin/models/provider-models/bulk-toggle'],
  ] as const) {
    const res = await h.call(method, path, method === 'GET' ? undefined : {}, h.user);
    t.is(res.status, 403, path);
    t.is(res.body.error.type, 'permission_error');
  }
  const pub = await h.call('GET', '/v1/models/providers', undefined, h.user);
  t.is(pub.status, 200);
  t.is(pub.body.object, 'list');
  const alpha = pub.body.data.find((p: any) => p.name === 'Alpha');
  t.truthy(alpha);
  t.false('base_url' in alpha);
  t.false('endpoints' in alpha);
  t.false('metadata' in alpha);
  const asAdmin = await h.call('GET', '/v1/models/providers', undefined, h.admin);
  t.truthy(asAdmin.body.data.find((p: any) => p.name === 'Alpha').base_url);
  // Inactive providers vanish for users and their models leave /v1/models at once (cache invalidated).
  await h.call('PATCH', `/v1/admin/providers/${alpha.id}`, { active: false });
  t.falsy((await h.call('GET', '/v1/models/providers', undefined, h.user)).body.data.find((p: any) => p.name === 'Alpha'));
  t.false((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'alpha/chat-1'));
  await h.call('PATCH', `/v1/admin/providers/${alpha.id}`, { active: true });
  t.true((await h.call('GET', '/v1/models', undefined, h.user)).body.data.some((m: any) => m.id === 'alpha/chat-1'));
});

test.serial('a provider PATCH emits model.updated once per model it serves, each with the model id (never null)', async (t) => {
  const knex = h.service.runtime.db.knex;
  const alpha = (await h.call('GET', '/v1/admin/providers')).body.data.find((p: any) => p.name === 'Alpha');
  const models = await knex('llm_provider_models').where({ provider_id: alpha.id }).select('id', 'model_public_id');
  t.true(models.length >= 2);
  const last = await knex('outbox_events').max<{ seq: string }[]>({ seq: 'seq' }).first();
  t.is((await h.call('PATCH', `/v1/admin/providers/${alpha.id}`, { metadata: { team: 'z' } })).status, 200);
  const events = await knex('outbox_events').where({ type: 'model.updated' }).andWhere('seq', '>', Number(last?.seq ?? 0)).select('data');
  t.deepEqual(events.map((e) => e.data.model_id).sort(), models.map((m) => m.model_public_id).sort());
  t.deepEqual(events.map((e) => e.data.provider_model_id).sort(), models.map((m) => m.id).sort());
  for (const e of events) {
    t.is(e.data.provider_id, alpha.id);
    t.deepEqual(e.data.changes.metadata.new, { team: 'z' });
  }
});
