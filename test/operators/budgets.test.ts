import test from 'ava';
import OpenAI, { NotFoundError, PermissionDeniedError, RateLimitError, type APIError } from 'openai';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, ManualClock, openRuntime, randomBase62, serviceUrls, startService, type Runtime } from '../../services/kit/index.js';
import { llmApiService } from '../../services/llm-api/service.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// Budgets and model allow-lists through the edge with the official SDK, on a manual clock; and one
// budget shared by two llm-api instances (separate runtimes and database pools on the same schema:
// nothing is shared in memory, exactly as two processes).
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const PER_REQUEST = 1000; // µUSD per request on every model of the fake
const clock = new ManualClock(Date.parse('2026-11-23T10:00:00Z'));
let p: TestPlatform;
let fake: FakeUpstream;
let admin: OpenAI;
let adminUserId: string;

const keyClient = (secret: string, baseURL = `${p.url}/v1`, headers: Record<string, string> = {}) =>
  new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': secret, Authorization: null, ...headers } });
const ask = (client: OpenAI, model = 'budget-model') => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello there' }] });

test.before(async () => {
  fake = await startFakeUpstream({ name: 'budget', models: [{ id: 'budget-model' }, { id: 'other-model' }] });
  p = await startTestPlatform({ clock, env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  admin = keyClient(ADMIN_KEY);
  await admin.post('/admin/providers', { body: { name: 'Budget', vendor: 'fake', base_url: fake.url } });
  const pms: any = await admin.get('/admin/models/provider-models', { query: { limit: 100 } });
  for (const pm of pms.data) {
    await admin.patch(`/admin/models/provider-models/${pm.id}`, { body: { pricing: { lines: [{ unit: 'per_request', amount_micro_usd: PER_REQUEST }] } } });
  }
  adminUserId = (await p.runtime.db.knex('users').where({ is_admin: true }).first()).id;
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
});

async function newKey(body: Record<string, unknown>, userId = adminUserId): Promise<{ id: string; key: string; [k: string]: unknown }> {
  return (await admin.post('/admin/api-keys', { body: { user_id: userId, name: `k-${randomBase62(6)}`, tier: 'enterprise', ...body } })) as any;
}

test.serial('a key over its daily budget gets 429 insufficient_quota with the reset time, and succeeds again after the reset', async (t) => {
  const created = await newKey({ max_budget_micro_usd: 2500, budget_period: 'day' });
  t.is(created.max_budget_micro_usd, 2500);
  t.is(created.budget_period, 'day');
  const client = keyClient(created.key);
  // 0 → 1000 → 2000 → 3000: the third is admitted while under budget and may finish over it (one request of overshoot).
  for (let i = 0; i < 3; i++) await ask(client);
  const refused = await t.throwsAsync(ask(client), { instanceOf: RateLimitError });
  t.is((refused as APIError).code, 'insufficient_quota');
  t.regex((refused as APIError).message, /resets at 2026-11-24T00:00:00\.000Z/);
  t.is((refused as APIError).headers?.get('retry-after'), String(14 * 3600));
  const counter = await p.runtime.db.knex('llm_spend_counters').where({ scope: 'key', scope_id: created.id }).first();
  t.is(Number(counter.spent_micro_usd), 3000);
  t.is(counter.in_flight, 0);
  const chats = fake.chatCount();
  await t.throwsAsync(ask(client), { instanceOf: RateLimitError });
  t.is(fake.chatCount(), chats, 'a refused request never reaches the provider');

  clock.advance(14 * 3600 * 1000 + 1000); // past midnight UTC
  const after = await ask(client);
  t.is(after.choices[0]!.finish_reason, 'stop');
});

test.serial('the SDK with its default retries gives up at once on a spent budget: x-should-retry false, one request', async (t) => {
  const created = await newKey({ max_tokens: 5, budget_period: 'month' });
  let sent = 0;
  // openai-node sleeps for whatever Retry-After says before retrying a 429 (here, days), unless told not to retry.
  const client = new OpenAI({
    baseURL: `${p.url}/v1`,
    apiKey: 'unused',
    defaultHeaders: { 'X-API-Key': created.key, Authorization: null },
    fetch: (input, init) => {
      sent++;
      return fetch(input, init);
    },
  });
  await ask(client);
  const refused = await t.throwsAsync(ask(client), { instanceOf: RateLimitError });
  t.is((refused as APIError).code, 'insufficient_quota');
  t.is((refused as APIError).headers?.get('x-should-retry'), 'false');
  t.true(Number((refused as APIError).headers?.get('retry-after')) > 60);
  t.is(sent, 2, 'the refused call was sent once, never retried');
});

test.serial('token budgets and monthly periods refuse the same way', async (t) => {
  const created = await newKey({ max_tokens: 5, budget_period: 'month' });
  const client = keyClient(created.key);
  await ask(client); // 3 prompt + 5 completion tokens: over 5 after the first
  const refused = await t.throwsAsync(ask(client), { instanceOf: RateLimitError });
  t.is((refused as APIError).code, 'insufficient_quota');
  t.regex((refused as APIError).message, /monthly budget of this API key.*resets at 2026-12-01T00:00:00\.000Z/);
});

test.serial('a model outside the allow-list gets 403 naming it (key and user allow-lists, patterns)', async (t) => {
  const created = await newKey({ allowed_models: ['budget-*'] });
  const client = keyClient(created.key);
  await ask(client, 'budget-model');
  const denied = await t.throwsAsync(ask(client, 'other-model'), { instanceOf: PermissionDeniedError });
  t.regex((denied as APIError).message, /'other-model' is not allowed for this API key/);
  t.is((denied as APIError).code, 'model_not_allowed');

  // A user's allow-list applies to every key of the user.
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const guestId = (await p.runtime.db.knex('users').where({ is_guest: true }).orderBy('created_at', 'desc').first()).id;
  t.is(login.status, 201);
  const patched: any = await admin.patch(`/admin/users/${guestId}`, { body: { allowed_models: ['other-model'] } });
  t.deepEqual(patched.allowed_models, ['other-model']);
  const guestKey = await newKey({}, guestId);
  const guest = keyClient(guestKey.key);
  await ask(guest, 'other-model');
  const userDenied = await t.throwsAsync(ask(guest, 'budget-model'), { instanceOf: PermissionDeniedError });
  t.regex((userDenied as APIError).message, /'budget-model' is not allowed for this account/);
  // Clearing the allow-list with null.
  await admin.patch(`/admin/users/${guestId}`, { body: { allowed_models: null } });
  await ask(guest, 'budget-model');
  // Bad input is a 400 naming the field.
  const bad = await fetch(`${p.url}/v1/admin/api-keys/${guestKey.id}`, { method: 'PATCH', headers: { 'X-API-Key': ADMIN_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ max_budget_micro_usd: -1 }) });
  t.is(bad.status, 400);
  t.is(((await bad.json()) as any).error.param, 'max_budget_micro_usd');
});

test.serial('GET /v1/models lists only the models the allow-lists admit; retrieving another is 404 model_not_found naming model', async (t) => {
  const ids = async (client: OpenAI) => (await client.models.list()).data.map((m) => m.id).sort();
  const limitedKey = (await newKey({ allowed_models: ['budget-*'] })).key;
  const limited = keyClient(limitedKey);
  t.deepEqual(await ids(limited), ['budget-model']);
  t.is((await limited.models.retrieve('budget-model')).id, 'budget-model');
  const hidden = await t.throwsAsync(limited.models.retrieve('other-model'), { instanceOf: NotFoundError });
  t.is((hidden as APIError).code, 'model_not_found');
  t.is((hidden as APIError).param, 'model');
  t.regex((hidden as APIError).message, /'other-model' does not exist or you do not have access to it/);
  // Its catalog entry is hidden alike; an admitted model's is shown.
  const catalog = async (key: string, model: string) => (await fetch(`${p.url}/v1/models/catalogs/${model}`, { headers: { authorization: `Bearer ${key}` } })).status;
  t.is(await catalog(limitedKey, 'other-model'), 404);
  t.is(await catalog(limitedKey, 'budget-model'), 200);
  // A key without an allow-list sees every model.
  const open = keyClient((await newKey({})).key);
  t.deepEqual(await ids(open), ['budget-model', 'other-model']);
  t.is((await open.models.retrieve('other-model')).id, 'other-model');

  // The user's allow-list applies to every key of the user, together with the key's own.
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  t.is(login.status, 201);
  const userId = (await p.runtime.db.knex('users').where({ is_guest: true }).orderBy('created_at', 'desc').first()).id;
  await admin.patch(`/admin/users/${userId}`, { body: { allowed_models: ['other-model'] } });
  t.deepEqual(await ids(keyClient((await newKey({}, userId)).key)), ['other-model']);
  t.deepEqual(await ids(keyClient((await newKey({ allowed_models: ['budget-*'] }, userId)).key)), [], 'both lists apply: nothing is in both');
  // The admin routes are unchanged: the catalog is read whole.
  const pms: any = await admin.get('/admin/models/provider-models', { query: { limit: 100 } });
  t.true(pms.data.some((pm: any) => pm.model_public_id === 'other-model'));
});

test.serial('one budget holds across two llm-api instances sharing the database (bounded overshoot printed)', async (t) => {
  const budget = 10 * PER_REQUEST + 500;
  const created = await newKey({ max_budget_micro_usd: budget });
  // A second llm-api with its own runtime (pools, registry, recorder) on the same schema.
  const runtime: Runtime = await openRuntime(p.runtime.config, { name: 'llm-api-2', migrations: [], clock });
  const second = await startService(llmApiService, { runtime, gatewaySecret: p.gatewaySecret, urls: serviceUrls(runtime.config) });
  try {
    const identity = {
      [GATEWAY_TOKEN_HEADER]: p.gatewaySecret,
      [IDENTITY_HEADERS.authMethod]: 'apikey',
      [IDENTITY_HEADERS.userId]: adminUserId,
      [IDENTITY_HEADERS.subject]: adminUserId,
      [IDENTITY_HEADERS.apiKeyId]: created.id,
    };
    const viaEdge = keyClient(created.key);
    const direct = new OpenAI({ baseURL: `http://127.0.0.1:${second.server.port}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { Authorization: null, ...identity } });
    let ok = 0;
    let refused = 0;
    let busy = 0;
    // Waves of concurrent requests on both instances, each followed by one request alone, until that
    // one is refused as used up.
    for (let wave = 0; wave < 12; wave++) {
      const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => ask(i % 2 === 0 ? viaEdge : direct)));
      for (const r of results) {
        if (r.status === 'fulfilled') ok++;
        else if ((r.reason as APIError).code === 'insufficient_quota') refused++;
        else if ((r.reason as APIError).code === 'budget_busy') busy++;
        else throw r.reason;
      }
      const alone = await ask(wave % 2 === 0 ? direct : viaEdge).then(
        () => 'ok',
        (error: APIError) => error.code,
      );
      if (alone === 'ok') ok++;
      else if (alone === 'insufficient_quota') {
        refused++;
        break;
      } else throw new Error(`unexpected ${alone}`);
    }
    t.log(`${ok} admitted, ${refused} refused as used up, ${busy} asked to retry while others ran`);
    const counter = await p.runtime.db.knex('llm_spend_counters').where({ scope: 'key', scope_id: created.id }).first();
    const spent = Number(counter.spent_micro_usd);
    const overshoot = spent - budget;
    t.log(`budget ${budget} µUSD, spent ${spent} µUSD over ${ok} admitted requests; overshoot ${overshoot} µUSD (one request = ${PER_REQUEST})`);
    t.is(spent, ok * PER_REQUEST);
    t.true(spent >= budget, 'the budget was used up');
    t.true(overshoot < PER_REQUEST, 'overshoot bounded by one request');
    t.true(refused > 0);
    t.is(counter.in_flight, 0);
  } finally {
    await second.server.close(1000);
    await second.stop();
    await runtime.close();
  }
});
