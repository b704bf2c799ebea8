import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Provider values that could never work are refused when an admin sends them, with a 400 naming
// the field: not stored, then failing every request (or sending the provider a broken request).
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'val', apiKey: 'sk-val-good', models: [{ id: 'val/model' }] });
  h = await startLlmHarness({ LLM_HEALTH_FAILURE_THRESHOLD: '1', LLM_HEALTH_COOLDOWN_MS: '600000' });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const providerCount = async () => Number((await h.service.runtime.db.knex('llm_providers').count({ n: '*' }).first())!.n);

test.serial('an API key with a newline, a space or a non-ASCII character is a 400 naming api_key, on register and on PATCH', async (t) => {
  const before = await providerCount();
  for (const key of ['sk-val-good\n', ' sk-val-good', 'sk val good', 'sk-\u043a\u043b\u044e\u0447', 'sk-\u0000x']) {
    const res = await h.call('POST', '/v1/admin/providers', { name: `bad-key-${before}`, vendor: 'val', base_url: fake.url, api_key: key });
    t.is(res.status, 400, JSON.stringify(key));
    t.is(res.body.error?.param, 'api_key');
    t.is(res.body.error?.type, 'invalid_request_error');
    // The key itself is never echoed back.
    t.false(JSON.stringify(res.body).includes(key.trim()), JSON.stringify(key));
  }
  t.is(await providerCount(), before);

  const good = await h.call('POST', '/v1/admin/providers', { name: 'Val good key', vendor: 'val', base_url: fake.url, api_key: 'sk-val-good' });
  t.is(good.status, 201);
  t.deepEqual(good.body.models.map((m: { id: string }) => m.id), ['val/model']);
  const patched = await h.call('PATCH', `/v1/admin/providers/${good.body.id}`, { api_key: 'sk-val-good\n' });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'api_key');
  // The provider still answers with its working key.
  const chat = await h.call('POST', '/v1/chat/completions', { model: 'val/model', messages: [{ role: 'user', content: 'hi' }] }, h.user);
  t.is(chat.status, 200);
  // Removing the key ("" or null) is still allowed.
  const removed = await h.call('PATCH', `/v1/admin/providers/${good.body.id}`, { api_key: '' });
  t.is(removed.status, 200);
  t.false(removed.body.api_key_configured);
  const restored = await h.call('PATCH', `/v1/admin/providers/${good.body.id}`, { api_key: 'sk-val-good' });
  t.is(restored.status, 200);
  t.true(restored.body.api_key_configured);
});

test.serial('a URL with credentials, a query or a fragment is a 400 naming the field; the credentials are never echoed', async (t) => {
  const before = await providerCount();
  const at = fake.url.replace('http://', 'http://user:hunter2secret@');
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ base_url: at }, 'base_url'],
    [{ url: at }, 'url'],
    [{ base_url: `${fake.url}?api_key=abc` }, 'base_url'],
    [{ base_url: `${fake.url}#frag` }, 'base_url'],
    [{ endpoints: [{ url: fake.url }, { url: at }] }, 'endpoints[1].url'],
  ];
  for (const [fields, param] of cases) {
    const res = await h.call('POST', '/v1/admin/providers', { name: 'url-case', vendor: 'val', ...fields });
    t.is(res.status, 400, JSON.stringify(fields));
    t.is(res.body.error?.param, param);
    t.false(JSON.stringify(res.body).includes('hunter2secret'));
  }
  t.is(await providerCount(), before);

  const good = await h.call('POST', '/v1/admin/providers', { name: 'Val url', vendor: 'val', base_url: fake.url });
  t.is(good.status, 201);
  const patched = await h.call('PATCH', `/v1/admin/providers/${good.body.id}`, { base_url: at });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'base_url');
  t.is((await h.call('GET', `/v1/admin/providers/${good.body.id}`)).body.base_url, fake.url);
});

test.serial('the same endpoint URL twice in one provider is a 400 naming the second (trailing slash or letter case aside)', async (t) => {
  const before = await providerCount();
  const dup = await h.call('POST', '/v1/admin/providers', { name: 'dup', vendor: 'val', endpoints: [{ url: fake.url }, { url: `${fake.url}/`, priority: 1 }] });
  t.is(dup.status, 400);
  t.is(dup.body.error.param, 'endpoints[1].url');
  const upper = fake.url.replace('http://', 'HTTP://');
  const dupCase = await h.call('POST', '/v1/admin/providers', { name: 'dup', vendor: 'val', endpoints: [{ url: fake.url }, { url: 'http://127.0.0.1:9/v1' }, { url: upper }] });
  t.is(dupCase.status, 400);
  t.is(dupCase.body.error.param, 'endpoints[2].url');
  t.is(await providerCount(), before);

  const good = await h.call('POST', '/v1/admin/providers', { name: 'Val endpoints', vendor: 'val', endpoints: [{ url: fake.url }] });
  t.is(good.status, 201);
  const patched = await h.call('PATCH', `/v1/admin/providers/${good.body.id}`, { endpoints: [{ url: fake.url }, { url: fake.url, priority: 2 }] });
  t.is(patched.status, 400);
  t.is(patched.body.error.param, 'endpoints[1].url');
  t.deepEqual((await h.call('GET', `/v1/admin/providers/${good.body.id}`)).body.endpoints.map((e: { url: string }) => e.url), [fake.url]);
});

test.serial('a PATCH whose base_url and url disagree is a 400 naming url, as on register, and changes nothing', async (t) => {
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Val both urls', vendor: 'val', base_url: fake.url, api_key: 'sk-val-good' });
  t.is(reg.status, 201);
  const other = fake.url.replace(/\/v1$/, '/v2');
  const patched = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: other, url: fake.url });
  t.is(patched.status, 400, JSON.stringify(patched.body));
  t.like(patched.body.error, { param: 'url', type: 'invalid_request_error', message: 'base_url and url must agree when both are given' });
  t.is((await h.call('GET', `/v1/admin/providers/${reg.body.id}`)).body.base_url, fake.url);
  // The same value under both names is one URL.
  const same = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: fake.url, url: fake.url, metadata: { both: 'same' } });
  t.is(same.status, 200, JSON.stringify(same.body));
});

test.serial('base_url and url that differ only by a trailing slash (or the letter case of the host) agree, on register and on PATCH; base_url is what is stored', async (t) => {
  const slashed = `${fake.url}/`;
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Val slash urls', vendor: 'val', base_url: fake.url, url: slashed, api_key: 'sk-val-good' });
  t.is(reg.status, 201, JSON.stringify(reg.body));
  t.is(reg.body.base_url, fake.url);
  const patched = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: slashed, url: fake.url.replace('http://', 'HTTP://') });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.is(patched.body.base_url, slashed);
  // A different path still disagrees.
  const other = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: fake.url, url: `${fake.url}/v2/` });
  t.is(other.status, 400);
  t.is(other.body.error.param, 'url');
});

test.serial('on a provider routed through endpoints, its base URL sent again (a trailing slash aside) is taken; a new one alone is a 400 naming it', async (t) => {
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Val routed', vendor: 'val', base_url: fake.url, endpoints: [{ url: fake.url }], api_key: 'sk-val-good' });
  t.is(reg.status, 201, JSON.stringify(reg.body));
  const again = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: `${fake.url}/` });
  t.is(again.status, 200, JSON.stringify(again.body));
  const moved = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { base_url: `${fake.url}/v2` });
  t.is(moved.status, 400, JSON.stringify(moved.body));
  t.is(moved.body.error.param, 'base_url');
});

test.serial('a sync of a provider whose every endpoint is switched off says so, rather than that the provider could not be reached', async (t) => {
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Val all off', vendor: 'val', endpoints: [{ url: fake.url }], api_key: 'sk-val-good' });
  t.is(reg.status, 201);
  t.is((await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { endpoints: [{ url: fake.url, enabled: false }] })).status, 200);
  const lists = fake.requests.filter((r) => r.path.endsWith('/models')).length;
  const res = await h.call('POST', `/v1/admin/providers/${reg.body.id}/sync`);
  t.is(res.status, 502);
  t.is(res.body.error.message, 'Could not synchronise models: model sync failed: every endpoint of the provider is switched off (enabled: false), so nothing was sent; switch one on');
  t.regex((await h.call('GET', `/v1/admin/providers/${reg.body.id}`)).body.last_sync_error, /every endpoint of the provider is switched off/);
  t.is(fake.requests.filter((r) => r.path.endsWith('/models')).length, lists);
});
