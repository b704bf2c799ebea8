import test from 'ava';
import { ManualClock, sha256Hex, userRevocation } from '../../../services/kit/index.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';
import { assertError, call, identityOf } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

// API keys at service level: create / list / delete / validate, caps and tiers, expiry and
// disabled users, revocations published, and the validation path's uniformity. Serial: one clock.
const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
const DAY = 24 * 3600 * 1000;
let svc: TestService;
let admin: TestUser;
const revoked: string[] = [];

test.before(async () => {
  // The timed sweep stays out of the way (about 23 days): the tests call it themselves, and a sweep
  // firing inside the validation test's listening window would add its statements to the count.
  svc = await startTestService(llmApiService, { clock, env: { API_KEYS_MAX_PER_USER: '3', API_KEY_SWEEP_INTERVAL_MS: '2000000000' } });
  admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  await svc.runtime.revocations.subscribe({ onRevoked: (m) => void revoked.push(m), onResync: () => {} });
});
test.after.always(() => svc?.close());

const as = (user: TestUser, method: 'jwt' | 'apikey' = 'jwt') => edgeHeaders(svc.gatewaySecret, user, method);
const validate = (key: string) => call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key } });

test.serial('create → secret once; list without secret or hash; validate; delete → 401 and revocation', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const created = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'laptop' } });
  t.is(created.status, 201, JSON.stringify(created.body));
  const key: string = created.body.key;
  t.regex(key, /^sk_[0-9A-Za-z]{32}$/);
  t.regex(created.body.id, /^key_/);
  t.is(created.body.name, 'laptop');
  t.is(created.body.tier, 'free');
  t.is(created.body.prefix, key.slice(0, 7));
  t.is(created.body.last_four, key.slice(-4));
  t.is(created.body.created_at, Math.floor(clock.now() / 1000));
  t.is(created.body.expires_at, null);
  // The secret is shown once: no cache keeps the answer.
  t.is(created.headers.get('cache-control'), 'no-store');

  // Only the SHA-256 hash is stored.
  const rows = await svc.runtime.db.knex('identity_api_keys').where({ user_id: user.id });
  t.is(rows.length, 1);
  t.is(rows[0].key_hash, sha256Hex(key));
  t.false(JSON.stringify(rows).includes(key));

  const list = await call(svc, 'GET', '/auth/api-keys', { headers: as(user) });
  t.is(list.status, 200);
  t.is(list.headers.get('cache-control'), null, 'a list without secrets is not marked');
  t.is(list.body.object, 'list');
  t.is(list.body.data.length, 1);
  const item = list.body.data[0];
  // The key's record with its budget and allow-list (none here), never the secret or its hash.
  t.deepEqual(Object.keys(item).sort(), [
    'allowed_models',
    'budget_period',
    'created_at',
    'expires_at',
    'id',
    'last_four',
    'last_used_at',
    'limits',
    'max_budget_micro_usd',
    'max_tokens',
    'name',
    'object',
    'prefix',
    'tier',
  ]);
  t.false(JSON.stringify(list.body).includes(key));
  t.false(JSON.stringify(list.body).includes(sha256Hex(key)));

  const ok = await validate(key);
  t.is(ok.status, 200, JSON.stringify(ok.body));
  t.deepEqual(ok.body, {
    user_id: user.id,
    subject: user.id,
    email: user.email,
    username: user.username,
    is_admin: false,
    key_id: created.body.id,
    tier: 'free',
    limits: { requests_per_minute: 3, requests_per_day: 50 },
    custom_limits: null,
    expires_at: null,
  });
  // The X-API-Key header works as well as the body.
  t.is((await call(svc, 'POST', '/llm/internal/auth/validate-api-key', { headers: { 'x-api-key': key } })).status, 200);

  const del = await call(svc, 'DELETE', `/auth/api-keys/${created.body.id}`, { headers: as(user) });
  t.is(del.status, 200);
  t.deepEqual(del.body, { id: created.body.id, object: 'api_key.deleted', deleted: true });
  t.true(revoked.includes(sha256Hex(key)));
  assertError(t, await validate(key), 401, 'api_key');
  t.is((await call(svc, 'GET', '/auth/api-keys', { headers: as(user) })).body.data.length, 0);
  assertError(t, await call(svc, 'DELETE', `/auth/api-keys/${created.body.id}`, { headers: as(user) }), 404);
});

test.serial("another user's key is a 404; an API key cannot manage keys; guests cannot create keys", async (t) => {
  const owner = await createTestUser(svc.runtime.db.knex);
  const stranger = await createTestUser(svc.runtime.db.knex);
  const created = await call(svc, 'POST', '/auth/api-keys', { headers: as(owner), body: { name: 'k' } });
  assertError(t, await call(svc, 'DELETE', `/auth/api-keys/${created.body.id}`, { headers: as(stranger) }), 404);
  assertError(t, await call(svc, 'DELETE', '/auth/api-keys/not-an-id', { headers: as(owner) }), 404);
  t.is((await validate(created.body.key)).status, 200);
  t.is((await call(svc, 'GET', '/auth/api-keys', { headers: as(stranger) })).body.data.length, 0);

  assertError(t, await call(svc, 'POST', '/auth/api-keys', { headers: as(owner, 'apikey'), body: { name: 'k2' } }), 403);
  assertError(t, await call(svc, 'GET', '/auth/api-keys', { headers: as(owner, 'apikey') }), 403);
  assertError(t, await call(svc, 'DELETE', `/auth/api-keys/${created.body.id}`, { headers: as(owner, 'apikey') }), 403);
  assertError(t, await call(svc, 'POST', '/auth/api-keys', { body: { name: 'k2' } }), 401);

  const guest = await createTestUser(svc.runtime.db.knex, { guest: true });
  assertError(t, await call(svc, 'POST', '/auth/api-keys', { headers: as(guest), body: { name: 'g' } }), 403);
});

test.serial('the per-user cap on active keys (3 here) → 400; deleting one frees a slot', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const made = await Promise.all([1, 2, 3, 4].map((i) => call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: `k${i}` } })));
  t.deepEqual(made.map((r) => r.status).sort(), [201, 201, 201, 400]);
  const refused = made.find((r) => r.status === 400)!;
  assertError(t, refused, 400);
  t.is(refused.body.error.code, 'api_key_limit_reached');
  const first = made.find((r) => r.status === 201)!;
  await call(svc, 'DELETE', `/auth/api-keys/${first.body.id}`, { headers: as(user) });
  t.is((await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'k5' } })).status, 201);
});

test.serial('tiers: only admins create pro/enterprise keys or set limits; admin endpoints; PATCH publishes', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  assertError(t, await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'p', tier: 'pro' } }), 403, 'tier');
  assertError(t, await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'p', limits: { requests_per_minute: 1000 } } }), 403, 'limits');
  assertError(t, await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(user), body: { user_id: user.id, name: 'p', tier: 'pro' } }), 403);

  const pro = await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: user.id, name: 'p', tier: 'pro' } });
  t.is(pro.status, 201, JSON.stringify(pro.body));
  const v = await validate(pro.body.key);
  t.is(v.body.tier, 'pro');
  t.deepEqual(v.body.limits, { requests_per_minute: 60, requests_per_day: 100000 });
  t.is(v.body.user_id, user.id);

  const patched = await call(svc, 'PATCH', `/llm/v1/admin/api-keys/${pro.body.id}`, {
    headers: as(admin),
    body: { tier: 'enterprise', limits: { requests_per_minute: 500 } },
  });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.is(patched.body.tier, 'enterprise');
  t.true(revoked.includes(sha256Hex(pro.body.key)));
  const afterPatch = (await validate(pro.body.key)).body;
  t.deepEqual(afterPatch.limits, { requests_per_minute: 500, requests_per_day: null });
  t.deepEqual(afterPatch.custom_limits, { requests_per_minute: 500 }, 'what the administrator set, apart from the tier');

  const listed = await call(svc, 'GET', `/v1/admin/api-keys?user_id=${user.id}`, { headers: as(admin) });
  t.is(listed.body.data.length, 1);
  t.is(listed.body.total_count, 1);
  const all = await call(svc, 'GET', '/v1/admin/api-keys?limit=1', { headers: as(admin) });
  t.is(all.body.data.length, 1);
  t.true(all.body.has_more);
  t.false(JSON.stringify(all.body).includes('key_hash'));
  assertError(t, await call(svc, 'GET', '/v1/admin/api-keys?limit=-1', { headers: as(admin) }), 400, 'limit');
  assertError(t, await call(svc, 'POST', '/v1/admin/api-keys', { headers: as(admin), body: { user_id: 'user_nobody', name: 'x', tier: 'free' } }), 404, 'user_id');
  assertError(t, await call(svc, 'PATCH', `/v1/admin/api-keys/${pro.body.id}`, { headers: as(admin), body: {} }), 400, 'tier');
  assertError(t, await call(svc, 'PATCH', `/v1/admin/api-keys/${pro.body.id}`, { headers: as(admin), body: { tier: 'gold' } }), 400, 'tier');
  assertError(t, await call(svc, 'PATCH', '/v1/admin/api-keys/key_000000000000000000000000', { headers: as(admin), body: { tier: 'pro' } }), 404);
});

test.serial('an expired key is refused, swept, and its revocation published', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const created = await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'short', expires_in_days: 1 } });
  t.is(created.body.expires_at, Math.floor((clock.now() + DAY) / 1000));
  t.is((await validate(created.body.key)).status, 200);
  clock.advance(DAY);
  assertError(t, await validate(created.body.key), 401, 'api_key');
  t.is((await call(svc, 'GET', '/auth/api-keys', { headers: as(user) })).body.data.length, 0);
  const identity = identityOf(svc.runtime);
  await identity.apiKeys.sweepExpired();
  t.true(revoked.includes(sha256Hex(created.body.key)));
  t.is(await svc.runtime.db.knex('identity_api_keys').where({ id: created.body.id }).first(), undefined);
});

test.serial('disabling a user revokes its keys and refresh tokens at once; admin users endpoints', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const key = (await call(svc, 'POST', '/auth/api-keys', { headers: as(user), body: { name: 'k' } })).body.key;
  t.is((await validate(key)).status, 200);
  // A request first, so the kit's user directory has the user cached.
  t.is((await call(svc, 'GET', '/auth/me', { headers: as(user) })).status, 200);

  assertError(t, await call(svc, 'GET', '/v1/admin/users', { headers: as(user) }), 403);
  const list = await call(svc, 'GET', '/v1/admin/users?limit=2', { headers: as(admin) });
  t.is(list.status, 200);
  t.is(list.body.object, 'list');
  t.is(list.body.data.length, 2);
  t.true(list.body.has_more);
  t.true(list.body.total_count >= 3);
  const byEmail = await call(svc, 'GET', `/v1/admin/users?email=${encodeURIComponent(user.email.toUpperCase())}`, { headers: as(admin) });
  t.deepEqual(byEmail.body.data.map((u: any) => u.id), [user.id]);
  assertError(t, await call(svc, 'GET', '/v1/admin/users?limit=0', { headers: as(admin) }), 400, 'limit');
  assertError(t, await call(svc, 'GET', '/v1/admin/users?is_guest=maybe', { headers: as(admin) }), 400, 'is_guest');

  const disabled = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { disabled: true } });
  t.is(disabled.status, 200, JSON.stringify(disabled.body));
  t.true(disabled.body.disabled);
  t.true(revoked.includes(userRevocation(user.id)));
  t.true(revoked.includes(sha256Hex(key)));
  assertError(t, await validate(key), 401);
  assertError(t, await call(svc, 'GET', '/auth/me', { headers: as(user) }), 401);

  const promoted = await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { disabled: false, is_admin: true } });
  t.true(promoted.body.is_admin);
  t.false(promoted.body.disabled);
  // The directory was told: the new admin can reach admin endpoints at once.
  t.is((await call(svc, 'GET', '/v1/admin/users', { headers: as(user) })).status, 200);

  assertError(t, await call(svc, 'PATCH', `/v1/admin/users/${admin.id}`, { headers: as(admin), body: { disabled: true } }), 400, 'disabled');
  assertError(t, await call(svc, 'PATCH', `/v1/admin/users/${user.id}`, { headers: as(admin), body: { is_admin: 'yes' } }), 400, 'is_admin');
  assertError(t, await call(svc, 'PATCH', '/v1/admin/users/user_000000000000000000000000', { headers: as(admin), body: { is_admin: true } }), 404);
});

test.serial('a disabled guest cannot refresh (refresh tokens revoked)', async (t) => {
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  t.is((await call(svc, 'PATCH', `/v1/admin/users/${login.body.user_id}`, { headers: as(admin), body: { disabled: true } })).status, 200);
  const rows = await svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: login.body.user_id });
  t.true(rows.every((r: any) => r.revoked_at !== null));
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } }), 401, 'refresh_token');
});

test.serial('unknown, deleted, expired keys and keys of disabled users: same 401, same statements', async (t) => {
  const knex = svc.runtime.db.knex;
  const mk = async (body: Record<string, unknown> = { name: 'k' }) => {
    const u = await createTestUser(knex);
    return { user: u, key: (await call(svc, 'POST', '/auth/api-keys', { headers: as(u), body })).body };
  };
  const deleted = await mk();
  await call(svc, 'DELETE', `/auth/api-keys/${deleted.key.id}`, { headers: as(deleted.user) });
  const expired = await mk({ name: 'e', expires_in_days: 1 });
  const ofDisabled = await mk();
  await knex('users').where({ id: ofDisabled.user.id }).update({ disabled: true });
  const valid = await mk();
  clock.advance(DAY + 1);
  const cases: Record<string, string> = {
    unknown: 'sk_' + 'A'.repeat(32),
    deleted: deleted.key.key,
    expired: expired.key.key,
    disabled_user: ofDisabled.key.key,
  };

  const statements: Record<string, string[]> = {};
  for (const [name, key] of Object.entries(cases)) {
    const seen: string[] = [];
    const listener = (q: { sql: string }) => void (/identity_api_keys|users/.test(q.sql) && seen.push(q.sql));
    knex.on('query', listener);
    const r = await validate(key);
    knex.off('query', listener);
    assertError(t, r, 401, 'api_key');
    t.deepEqual({ ...r.body.error, request_id: undefined }, { type: 'auth_error', code: 'unauthorized', message: 'Invalid API key', param: 'api_key', request_id: undefined });
    statements[name] = seen;
  }
  // Every failure runs exactly the one lookup statement (by hash), whatever the reason.
  t.is(statements.unknown!.length, 1);
  for (const name of Object.keys(cases)) t.deepEqual(statements[name], statements.unknown, name);
  t.is((await validate(valid.key.key)).status, 200);

  // Bad input to the validation endpoint.
  assertError(t, await call(svc, 'POST', '/internal/auth/validate-api-key', { body: {} }), 400, 'api_key');
  assertError(t, await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: 12 } }), 400, 'api_key');
  assertError(t, await validate('not-a-key'), 401, 'api_key');
});

test.serial('bad input on key creation: 400 shape A naming the parameter', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const post = (body: unknown) => call(svc, 'POST', '/auth/api-keys', { headers: as(user), body });
  // An empty body is a valid request (the name defaults), see test/llm-api/conversations/pagination.test.ts.
  assertError(t, await post({ name: '' }), 400, 'name');
  assertError(t, await post({ name: '   ' }), 400, 'name');
  assertError(t, await post({ name: 'n'.repeat(257) }), 400, 'name');
  assertError(t, await post({ name: 7 }), 400, 'name');
  assertError(t, await post({ name: 'ok', tier: 'platinum' }), 400, 'tier');
  assertError(t, await post({ name: 'ok', expires_in_days: 0 }), 400, 'expires_in_days');
  assertError(t, await post({ name: 'ok', expires_in_days: 1.5 }), 400, 'expires_in_days');
  assertError(t, await post({ name: 'ok', secret: 'mine' }), 400);
  assertError(t, await call(svc, 'POST', '/auth/api-keys', { headers: as(user), rawBody: 'name=x', }), 400, 'body');
  t.is((await post({ name: 'n'.repeat(256) })).status, 201);
});
