import test from 'ava';
import OpenAI, { BadRequestError, PermissionDeniedError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// Usage and cost reports through the edge with the official SDK: the rows must match the token
// counts the fake upstream reported and the pricing configured on each provider model, grouped
// every way the API offers.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fakeA: FakeUpstream;
let fakeB: FakeUpstream;
let admin: OpenAI;
let guest: OpenAI;
let guestKeyClient: OpenAI;
const ids: Record<string, string> = {};

// Pricing: model-a 1 µUSD per prompt token and 2 per completion token; model-b 500 per request plus 3 per prompt token.
const PRICING: Record<string, { lines: Array<{ unit: string; amount_micro_usd: number }> }> = {
  'model-a': { lines: [{ unit: 'per_1k_prompt_tokens', amount_micro_usd: 1000 }, { unit: 'per_1k_completion_tokens', amount_micro_usd: 2000 }] },
  'model-b': { lines: [{ unit: 'per_request', amount_micro_usd: 500 }, { unit: 'per_1m_prompt_tokens', amount_micro_usd: 3_000_000 }] },
};
const cost = (model: string, u: { prompt_tokens: number; completion_tokens: number }) =>
  model === 'model-a' ? u.prompt_tokens * 1 + u.completion_tokens * 2 : 500 + u.prompt_tokens * 3;

interface Expected {
  user: string;
  key: string | null;
  model: string;
  provider: string;
  prompt: number;
  completion: number;
  cost: number;
}
const made: Expected[] = [];

test.before(async () => {
  fakeA = await startFakeUpstream({ name: 'alpha', models: [{ id: 'model-a' }] });
  fakeB = await startFakeUpstream({ name: 'beta', models: [{ id: 'model-b' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_USAGE_FLUSH_MS: '20' } });
  admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  const provA: any = await admin.post('/admin/providers', { body: { name: 'Alpha', vendor: 'fake', base_url: fakeA.url } });
  const provB: any = await admin.post('/admin/providers', { body: { name: 'Beta', vendor: 'fake', base_url: fakeB.url } });
  ids.providerA = provA.id;
  ids.providerB = provB.id;
  const pms: any = await admin.get('/admin/models/provider-models', { query: { limit: 100 } });
  for (const pm of pms.data) {
    if (PRICING[pm.model_public_id]) await admin.patch(`/admin/models/provider-models/${pm.id}`, { body: { pricing: PRICING[pm.model_public_id] } });
  }
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const token = ((await login.json()) as { access_token: string }).access_token;
  guest = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: token, maxRetries: 0 });
  const knex = p.runtime.db.knex;
  ids.admin = (await knex('users').where({ is_admin: true }).first()).id;
  ids.guest = (await knex('users').where({ is_guest: true }).first()).id;
  ids.adminKey = (await knex('identity_api_keys').where({ user_id: ids.admin }).first()).id;
  const guestKey: any = await admin.post('/admin/api-keys', { body: { user_id: ids.guest, name: 'guest key', tier: 'free' } });
  ids.guestKey = guestKey.id;
  guestKeyClient = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': guestKey.key, Authorization: null } });

  const calls: Array<[OpenAI, string, string, string | null, string]> = [
    [guest, 'model-a', ids.guest, null, 'one two three'],
    [guest, 'model-a', ids.guest, null, 'words:9 four five'],
    [guestKeyClient, 'model-b', ids.guest, ids.guestKey, 'six'],
    [admin, 'model-a', ids.admin, ids.adminKey, 'seven eight'],
    [admin, 'model-b', ids.admin, ids.adminKey, 'nine ten eleven twelve'],
  ];
  for (const [client, model, user, key, text] of calls) {
    const res = await client.chat.completions.create({ model, messages: [{ role: 'user', content: text }] });
    const usage = res.usage!;
    made.push({ user, key, model, provider: model === 'model-a' ? ids.providerA! : ids.providerB!, prompt: usage.prompt_tokens, completion: usage.completion_tokens, cost: cost(model, usage) });
  }
  // The writer works off the request path: wait until the rollup holds every request.
  await waitFor(async () => {
    const row = await knex('llm_usage_daily').sum({ n: 'requests' }).first();
    return Number(row?.n ?? 0) >= calls.length ? true : null;
  }, 15_000, 'usage rollup');
});
test.after.always(async () => {
  await p?.stop();
  await fakeA?.close();
  await fakeB?.close();
});

function expectGrouped(keyOf: (e: Expected) => string) {
  const out = new Map<string, { requests: number; prompt: number; completion: number; cost: number }>();
  for (const e of made) {
    const k = keyOf(e);
    const acc = out.get(k) ?? { requests: 0, prompt: 0, completion: 0, cost: 0 };
    acc.requests++;
    acc.prompt += e.prompt;
    acc.completion += e.completion;
    acc.cost += e.cost;
    out.set(k, acc);
  }
  return out;
}

const today = () => new Date().toISOString().slice(0, 10);

test('admin usage grouped by user, key, model, provider and day matches upstream usage and pricing', async (t) => {
  const cases: Array<[string, (e: Expected) => string, (r: any) => string]> = [
    ['user', (e) => e.user, (r) => r.user_id],
    ['key', (e) => e.key ?? 'null', (r) => String(r.key_id)],
    ['model', (e) => e.model, (r) => r.model],
    ['provider', (e) => e.provider, (r) => r.provider_id],
    ['day', () => today(), (r) => r.day],
    ['user,model', (e) => `${e.user}|${e.model}`, (r) => `${r.user_id}|${r.model}`],
    ['day,user,key,model,provider', (e) => `${today()}|${e.user}|${e.key}|${e.model}|${e.provider}`, (r) => `${r.day}|${r.user_id}|${r.key_id}|${r.model}|${r.provider_id}`],
  ];
  for (const [groupBy, expectKey, rowKey] of cases) {
    const page: any = await admin.get('/admin/usage', { query: { group_by: groupBy, limit: 100 } });
    const expected = expectGrouped(expectKey);
    t.is(page.object, 'list');
    t.is(page.total_count, expected.size, groupBy);
    t.is(page.data.length, expected.size, groupBy);
    for (const row of page.data) {
      const want = expected.get(rowKey(row));
      t.truthy(want, `${groupBy}: unexpected row ${rowKey(row)}`);
      t.is(row.requests, want!.requests, groupBy);
      t.is(row.prompt_tokens, want!.prompt, groupBy);
      t.is(row.completion_tokens, want!.completion, groupBy);
      t.is(row.total_tokens, want!.prompt + want!.completion, groupBy);
      t.is(row.cost_micro_usd, want!.cost, groupBy);
      t.is(row.reasoning_tokens, 0);
    }
  }
  const total: any = await admin.get('/admin/usage');
  t.is(total.data[0].cost_micro_usd, made.reduce((s, e) => s + e.cost, 0));
  t.is(total.data[0].requests, made.length);
});

test('filters: user_id, key_id, model, provider_id, from/to; pagination', async (t) => {
  const byKey: any = await admin.get('/admin/usage', { query: { key_id: ids.guestKey } });
  t.is(byKey.data[0].requests, 1);
  t.is(byKey.data[0].cost_micro_usd, made.find((e) => e.key === ids.guestKey)!.cost);
  const byModel: any = await admin.get('/admin/usage', { query: { model: 'model-b', provider_id: ids.providerB } });
  t.is(byModel.data[0].requests, 2);
  const byUser: any = await admin.get('/admin/usage', { query: { user_id: ids.admin, model: 'model-a' } });
  t.is(byUser.data[0].requests, 1);
  const past: any = await admin.get('/admin/usage', { query: { from: '2000-01-01', to: '2000-12-31', group_by: 'day' } });
  t.deepEqual([past.total_count, past.data], [0, []]);
  const inRange: any = await admin.get('/admin/usage', { query: { from: today(), to: today() } });
  t.is(inRange.data[0].requests, made.length);
  const first: any = await admin.get('/admin/usage', { query: { group_by: 'user,key', limit: 2 } });
  const second: any = await admin.get('/admin/usage', { query: { group_by: 'user,key', limit: 2, offset: 2 } });
  t.is(first.total_count, 3);
  t.true(first.has_more);
  t.is(second.data.length, 1);
  t.false(second.has_more);
  const bad = await t.throwsAsync(admin.get('/admin/usage', { query: { group_by: 'colour' } }), { instanceOf: BadRequestError });
  t.is((bad as any).param, 'group_by');
  await t.throwsAsync(admin.get('/admin/usage', { query: { from: 'yesterday' } }), { instanceOf: BadRequestError });
  // Days of the right form that do not exist are 400s naming the field, never a database error.
  for (const [name, value] of [['from', '2026-13-45'], ['to', '2026-02-30'], ['from', '0000-01-01']] as const) {
    const impossible = await t.throwsAsync(admin.get('/admin/usage', { query: { [name]: value } }), { instanceOf: BadRequestError });
    t.is((impossible as any).param, name);
    t.regex((impossible as any).message, /must be a UTC day that exists/);
  }
  t.is((await admin.get('/admin/usage', { query: { from: '2024-02-29', to: '2024-02-29' } }) as any).object, 'list');
  const exported = await fetch(`${p.url}/v1/admin/usage/export?format=csv&from=9999-99-99`, { headers: { 'X-API-Key': ADMIN_KEY } });
  t.is(exported.status, 400);
  t.is(((await exported.json()) as any).error.param, 'from');
  const limits = await t.throwsAsync(admin.get('/admin/usage', { query: { limit: 0 } }), { instanceOf: BadRequestError });
  t.is((limits as any).param, 'limit');
  t.regex((limits as any).message, /must be between 1 and 1000/);
});

test("GET /v1/usage is the caller's own; the admin routes are admin-only", async (t) => {
  const own: any = await guest.get('/usage', { query: { group_by: 'model', user_id: ids.admin } });
  const mine = made.filter((e) => e.user === ids.guest);
  t.is(own.data.reduce((s: number, r: any) => s + r.requests, 0), mine.length);
  t.is(own.data.reduce((s: number, r: any) => s + r.cost_micro_usd, 0), mine.reduce((s, e) => s + e.cost, 0));
  await t.throwsAsync(guest.get('/admin/usage'), { instanceOf: PermissionDeniedError });
  await t.throwsAsync(guest.get('/admin/usage/export'), { instanceOf: PermissionDeniedError });
});

test('the CSV export streams the same rows', async (t) => {
  const res = await fetch(`${p.url}/v1/admin/usage/export?format=csv&group_by=model`, { headers: { 'X-API-Key': ADMIN_KEY } });
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /text\/csv/);
  const lines = (await res.text()).trim().split('\n');
  t.is(lines[0], 'model,requests,prompt_tokens,completion_tokens,reasoning_tokens,total_tokens,cost_micro_usd,cached_tokens');
  const expected = expectGrouped((e) => e.model);
  t.is(lines.length, 1 + expected.size);
  for (const line of lines.slice(1)) {
    const [model, requests, , , , , costCell] = line.split(',');
    t.is(Number(requests), expected.get(model!)!.requests);
    t.is(Number(costCell), expected.get(model!)!.cost);
  }
  const bad = await fetch(`${p.url}/v1/admin/usage/export?format=xml`, { headers: { 'X-API-Key': ADMIN_KEY } });
  t.is(bad.status, 400);
});

test('metrics: llm-api serves tokens and cost by model and provider matching the traffic; the edge serves its own', async (t) => {
  const text = await (await fetch(`${p.serviceUrl('llm-api')}/metrics`)).text();
  const value = (name: string, labels: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((part) => l.includes(part)));
    return line ? Number(line.split(' ').at(-1)) : undefined;
  };
  for (const model of ['model-a', 'model-b']) {
    const provider = model === 'model-a' ? ids.providerA : ids.providerB;
    const mine = made.filter((e) => e.model === model);
    t.is(value('llm_cost_micro_usd_total', `model="${model}",provider="${provider}"`), mine.reduce((s, e) => s + e.cost, 0), model);
    t.is(value('llm_tokens_total', `model="${model}",provider="${provider}",kind="prompt"`), mine.reduce((s, e) => s + e.prompt, 0), model);
    t.is(value('llm_tokens_total', `model="${model}",provider="${provider}",kind="completion"`), mine.reduce((s, e) => s + e.completion, 0), model);
    t.is(value('llm_requests_total', `model="${model}",provider="${provider}",outcome="ok"`), mine.length);
  }
  t.regex(text, /llm_upstream_latency_seconds_count\{[^}]*provider="prov_[^"]+",endpoint="http:\/\/127\.0\.0\.1:\d+",status="200"/);
  const edge = await fetch(`${p.metricsUrl}/metrics`);
  t.is(edge.status, 200);
  t.regex(await edge.text(), /# TYPE \w+/);
});
