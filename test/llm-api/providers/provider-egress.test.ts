import test from 'ava';
import { ApiError, createEgressGuard, setEgressResolver, type Resolver } from '../../../services/kit/index.js';
import { createLlmApiDeps } from '../../../services/llm-api/deps.js';
import { patchProvider, registerProvider, type ProviderDeps } from '../../../services/llm-api/providers/providers.js';
import { patchProviderSchema, registerProviderSchema } from '../../../services/llm-api/providers/schemas.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Provider URLs against the egress policy (PROVIDER_URL_ALLOW) when an admin stores them: a refused
// destination is a 400 naming the field, before anything is stored; a new key is checked against
// every URL it will be sent to. Names are answered by a stub resolver (no outside DNS here).
let h: LlmHarness;
let fake: FakeUpstream;
let deps: ProviderDeps;

const names: Record<string, string> = { 'inside.example': '10.0.0.7', 'provider.example': '127.0.0.1' };
const resolver: Resolver = async (host) => {
  const address = names[host];
  if (!address) throw Object.assign(new Error(`${host} does not resolve`), { code: 'ENOTFOUND' });
  return [{ address, family: 4 }];
};
// As PROVIDER_URL_ALLOW=127.0.0.1 builds it: only the listed destinations.
const guard = createEgressGuard({ allowHosts: ['127.0.0.1'], exclusive: true, resolver });

test.before(async () => {
  // The chat path's own guard (model sync at registration) asks the same stub.
  setEgressResolver(resolver);
  fake = await startFakeUpstream({ name: 'egress', models: [{ id: 'egress/model' }] });
  h = await startLlmHarness();
  deps = { ...(await createLlmApiDeps(h.service.ctx)).providers, guard };
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
  setEgressResolver(null);
});

const register = (body: Record<string, unknown>) => registerProvider(deps, registerProviderSchema.parse({ vendor: 'egress', ...body }));
const patch = (id: string, body: Record<string, unknown>) => patchProvider(deps, id, patchProviderSchema.parse(body));
const rows = async () => (await h.service.runtime.db.knex('llm_providers').select('name')).map((r: { name: string }) => r.name);

test.serial('register: a destination outside PROVIDER_URL_ALLOW is a 400 naming the field, and nothing is stored', async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ base_url: 'http://10.1.2.3/v1' }, 'base_url'],
    [{ url: 'http://169.254.169.254/latest' }, 'url'],
    [{ base_url: 'http://inside.example/v1' }, 'base_url'],
    [{ endpoints: [{ url: fake.url }, { url: 'http://inside.example/v1' }] }, 'endpoints[1].url'],
  ];
  for (const [fields, param] of cases) {
    const error = await t.throwsAsync(register({ name: 'refused', ...fields }), { instanceOf: ApiError });
    t.is(error!.status, 400, JSON.stringify(fields));
    t.is(error!.param, param);
    t.regex(error!.message, /not an allowed destination \(PROVIDER_URL_ALLOW\)/);
  }
  t.false((await rows()).includes('refused'));

  // Allowed: the fake on loopback (listed), and a name that resolves to it.
  const ok = await register({ name: 'Egress allowed', base_url: fake.url });
  t.deepEqual((ok.models as Array<{ id: string }>).map((m) => m.id), ['egress/model']);
  // A name that does not resolve (yet) is stored: the provider may be down; every call checks again.
  const later = await register({ name: 'Egress later', base_url: 'http://nowhere.example/v1' });
  t.truthy(later.sync_error);
});

test.serial('PATCH: a new URL is checked; a new key is checked against the URLs it will go to; removing a key is not', async (t) => {
  const provider = await register({ name: 'Egress patch', base_url: fake.url });
  const id = (provider as Record<string, unknown>).id as string;
  const url = await t.throwsAsync(patch(id, { base_url: 'http://inside.example/v1' }), { instanceOf: ApiError });
  t.is(url!.status, 400);
  t.is(url!.param, 'base_url');
  const endpoints = await t.throwsAsync(patch(id, { endpoints: [{ url: fake.url }, { url: 'http://10.9.9.9/v1' }] }), { instanceOf: ApiError });
  t.is(endpoints!.param, 'endpoints[1].url');
  const stored = await h.service.runtime.db.knex('llm_providers').where({ id }).first();
  t.is(stored.base_url, fake.url);
  t.deepEqual(stored.endpoints, []);

  // A provider stored before the allow-list narrowed (written as an older release would have).
  await h.service.runtime.db.knex('llm_providers').where({ id }).update({ base_url: 'http://10.20.30.40/v1' });
  const key = await t.throwsAsync(patch(id, { api_key: 'sk-new-key' }), { instanceOf: ApiError });
  t.is(key!.status, 400);
  t.is(key!.param, 'api_key');
  t.false(key!.message.includes('sk-new-key'));
  t.is((await h.service.runtime.db.knex('llm_providers').where({ id }).first()).api_key_sealed, null);
  // The key goes with a new, allowed URL in the same PATCH.
  const moved = await patch(id, { api_key: 'sk-new-key', base_url: fake.url });
  t.true(moved.api_key_configured as boolean);
  // Removing a key sends it nowhere.
  await h.service.runtime.db.knex('llm_providers').where({ id }).update({ base_url: 'http://10.20.30.40/v1' });
  const removed = await patch(id, { api_key: null });
  t.false(removed.api_key_configured as boolean);
  // A change that names no URL and no key is not held by the stored URL.
  const renamed = await patch(id, { name: 'Egress patch renamed' });
  t.is(renamed.name, 'Egress patch renamed');
});
