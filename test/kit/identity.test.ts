import test from 'ava';
import { createServiceApp, createUserDirectory, createUsersStore, decodeIdentityText, encodeIdentityText, identityHeadersFor, listen, ManualClock, parseSize, route, userRevocation, type Principal, type RunningServer } from '../../services/kit/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { createTestUser, edgeHeaders } from '../helpers/users.js';

// Identity headers from the edge become one platform user, with is_admin from the users table.
// Serial: the tests share one manual clock, and some of them move it.
const clock = new ManualClock();
let runtime: Awaited<ReturnType<typeof openTestRuntime>>;
let server: RunningServer;
let base: string;
let secret: string;

test.before(async () => {
  runtime = await openTestRuntime({ clock, env: { IDENTITY_CACHE_TTL_MS: '5000' } });
  secret = runtime.config.GATEWAY_SHARED_SECRET!;
  const app = createServiceApp({
    name: 'identity-test',
    logger: runtime.logger,
    gatewaySecret: secret,
    users: runtime.users,
    bodyLimit: parseSize('1mb'),
    routeTable: [
      route({ method: 'get', path: '/me', summary: 'the caller', access: 'user', handler: ({ principal }) => principal }),
      route({ method: 'get', path: '/admin', summary: 'admins only', access: 'admin', handler: () => ({ ok: true }) }),
    ],
  });
  server = await listen(app, { host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${server.port}`;
});
test.after.always(async () => {
  await server?.close(100);
  await runtime?.dispose();
});

test.serial('a platform user id resolves to that user, with is_admin and guest from the table', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const res = await fetch(`${base}/me`, { headers: edgeHeaders(secret, user, 'apikey') });
  t.is(res.status, 200);
  const me = (await res.json()) as Record<string, unknown>;
  t.like(me, { userId: user.id, email: user.email, username: user.username, authMethod: 'apikey', isAdmin: false, isGuest: false });
});

test.serial("the edge's key id names the API key of an API-key caller only, cut at 64 characters", async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const me = async (method: 'jwt' | 'apikey', keyId: string) => {
    const res = await fetch(`${base}/me`, { headers: { ...edgeHeaders(secret, user, method), 'x-user-key-id': keyId } });
    t.is(res.status, 200);
    return (await res.json()) as Record<string, unknown>;
  };
  t.like(await me('apikey', 'key_abc'), { userId: user.id, authMethod: 'apikey', apiKeyId: 'key_abc' });
  t.is((await me('apikey', `key_${'x'.repeat(100)}`)).apiKeyId, `key_${'x'.repeat(60)}`);
  // A JWT caller has no key, whatever the header says; the same user's principal stays cached meanwhile.
  t.like(await me('jwt', 'key_abc'), { userId: user.id, authMethod: 'jwt', apiKeyId: null });
  t.is((await me('apikey', '')).apiKeyId, null);
});

test.serial('admin routes answer 403 to non-admins and 200 to admins', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const admin = await createTestUser(runtime.db.knex, { admin: true });
  const denied = await fetch(`${base}/admin`, { headers: edgeHeaders(secret, user) });
  t.is(denied.status, 403);
  t.like(((await denied.json()) as { error: object }).error, { type: 'permission_error', code: 'forbidden' });
  t.is((await fetch(`${base}/admin`, { headers: edgeHeaders(secret, admin) })).status, 200);
});

test.serial('an unknown platform id, a disabled user and an unknown auth method are 401', async (t) => {
  const ghost = { id: 'user_AAAAAAAAAAAAAAAAAAAAAAAA', email: 'g@x', username: 'g', is_admin: false };
  t.is((await fetch(`${base}/me`, { headers: edgeHeaders(secret, ghost) })).status, 401);
  const user = await createTestUser(runtime.db.knex);
  await runtime.db.knex('users').where({ id: user.id }).update({ disabled: true });
  t.is((await fetch(`${base}/me`, { headers: edgeHeaders(secret, user) })).status, 401);
  const other = await createTestUser(runtime.db.knex);
  const headers = { ...edgeHeaders(secret, other), 'x-auth-method': 'cookie' };
  t.is((await fetch(`${base}/me`, { headers })).status, 401);
});

test.serial('an external subject maps to one platform user, created on first sight and reused after', async (t) => {
  const headers = {
    'x-gateway-token': secret,
    'x-auth-method': 'jwt',
    'x-user-id': 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    'x-user-subject': 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    'x-user-email': 'kc@example.test',
  };
  const first = (await (await fetch(`${base}/me`, { headers })).json()) as { userId: string };
  t.regex(first.userId, /^user_/);
  clock.advance(10_000); // past the cache: the second resolution reads the table again
  const second = (await (await fetch(`${base}/me`, { headers })).json()) as { userId: string };
  t.is(second.userId, first.userId);
  const rows = await runtime.db.knex('users').where({ subject: 'f47ac10b-58cc-4372-a567-0e02b2c3d479' });
  t.is(rows.length, 1);
});

test.serial("an external user whose e-mail or name is longer than the table's columns is served (not a 500): those are not stored; a subject too long for its column is 401", async (t) => {
  const subject = 'c1d2e3f4-0000-4000-8000-00000000long';
  // What an external issuer may sign and the edge passes on (the service reads up to 512 characters).
  const email = `${'a'.repeat(400)}@example.test`;
  const username = 'n'.repeat(300);
  const headers = { 'x-gateway-token': secret, 'x-auth-method': 'jwt', 'x-user-id': subject, 'x-user-subject': subject, 'x-user-email': email, 'x-user-username': username };
  const res = await fetch(`${base}/me`, { headers });
  t.is(res.status, 200, await res.clone().text());
  t.like((await res.json()) as Principal, { email, username });
  t.like(await runtime.db.knex('users').where({ subject }).first(), { email: null, username: null });

  const long = 's'.repeat(300);
  const refused = await fetch(`${base}/me`, { headers: { ...headers, 'x-user-id': long, 'x-user-subject': long } });
  t.is(refused.status, 401, await refused.clone().text());
  t.is(((await refused.json()) as { error: { message: string } }).error.message, 'Unknown or disabled user');
});

test.serial('a Unicode name and e-mail the edge sent encoded are stored and answered as the text they encode, and travel on encoded', async (t) => {
  const subject = 'b8e6c3a2-6a5e-4f7d-9d51-3c2f2d6a1e01';
  const headers = {
    'x-gateway-token': secret,
    'x-auth-method': 'jwt',
    'x-user-id': subject,
    'x-user-subject': subject,
    'x-user-email': encodeIdentityText('josé@例子.test')!,
    'x-user-username': encodeIdentityText('李雷')!,
  };
  t.is(headers['x-user-username'], "UTF-8''%E6%9D%8E%E9%9B%B7");
  const me = (await (await fetch(`${base}/me`, { headers })).json()) as Principal;
  t.is(me.username, '李雷');
  t.is(me.email, 'josé@例子.test');
  const row = await runtime.db.knex('users').where({ subject }).first();
  t.like(row, { username: '李雷', email: 'josé@例子.test' });
  // A service-to-service call for this user carries the same encoded values (Node refuses to send
  // anything past U+00FF in a header), and the receiving service reads the same text back.
  const onward = identityHeadersFor(me);
  t.is(onward['x-user-username'], headers['x-user-username']);
  t.is(((await (await fetch(`${base}/me`, { headers: { ...onward, 'x-gateway-token': secret } })).json()) as Principal).username, '李雷');
  // ASCII passes as it is; a value that only looks encoded, or has no UTF-8 form, does not confuse either side.
  t.is(encodeIdentityText('ada@example.test'), 'ada@example.test');
  t.is(decodeIdentityText(encodeIdentityText("UTF-8''ada")!), "UTF-8''ada");
  t.is(encodeIdentityText('broken \ud800'), null);
  t.is(decodeIdentityText("UTF-8''%E6%9D"), null);
});

test.serial('admin changes take effect after the short cache TTL, or at once when invalidated', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  t.is((await fetch(`${base}/admin`, { headers: edgeHeaders(secret, user) })).status, 403);
  await runtime.db.knex('users').where({ id: user.id }).update({ is_admin: true });
  t.is((await fetch(`${base}/admin`, { headers: edgeHeaders(secret, user) })).status, 403, 'still cached');
  clock.advance(5001);
  t.is((await fetch(`${base}/admin`, { headers: edgeHeaders(secret, user) })).status, 200);
  await runtime.db.knex('users').where({ id: user.id }).update({ is_admin: false });
  runtime.users.invalidate(user.id);
  t.is((await fetch(`${base}/admin`, { headers: edgeHeaders(secret, user) })).status, 403);
});

test.serial('a user revocation published by another process drops the cached row at once', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  t.is((await fetch(`${base}/me`, { headers: edgeHeaders(secret, user) })).status, 200);
  await runtime.db.knex('users').where({ id: user.id }).update({ disabled: true });
  t.is((await fetch(`${base}/me`, { headers: edgeHeaders(secret, user) })).status, 200, 'still cached');
  await runtime.revocations.publish(userRevocation(user.id));
  t.is((await fetch(`${base}/me`, { headers: edgeHeaders(secret, user) })).status, 401);
});

/**
 * A users store whose first lookup reads the row, then holds its answer until `release` is called:
 * a lookup that read the row before a change and answers after the change's invalidation.
 */
function heldFirstLookup() {
  const store = createUsersStore(runtime.db.knex);
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let signalRead!: () => void;
  const read = new Promise<void>((resolve) => (signalRead = resolve));
  let calls = 0;
  const hold = async <T>(answer: Promise<T>): Promise<T> => {
    if (++calls > 1) return answer;
    const row = await answer;
    signalRead();
    await released;
    return row;
  };
  const held: typeof store = {
    ...store,
    byId: (id, trx) => hold(store.byId(id, trx)),
    ensureExternal: (input) => hold(store.ensureExternal(input)),
  };
  return { store: held, read, release };
}

test.serial('a lookup that read the row before an invalidation answers its own waiters but is not cached: the next request sees the change', async (t) => {
  const admin = await createTestUser(runtime.db.knex, { admin: true });
  const { store, read, release } = heldFirstLookup();
  const directory = createUserDirectory(store, { ttlMs: 5000, clock });
  const claims = { authMethod: 'jwt' as const, userId: admin.id, subject: admin.id, email: admin.email, username: admin.username };
  const before = directory.resolve(claims);
  await read; // the row was read while the user was still an administrator
  await runtime.db.knex('users').where({ id: admin.id }).update({ is_admin: false });
  directory.invalidate(admin.id); // what the demotion's `user:<id>` revocation does in every process
  release();
  t.is((await before)?.isAdmin, true, 'a request that was already waiting gets the row it read');
  // No time passes: without the fix the old row was cached by the late lookup and served for the TTL.
  t.is((await directory.resolve(claims))?.isAdmin, false);
});

test.serial("an external identity's request after an invalidation does not join a lookup that began before it", async (t) => {
  const subject = `kc-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const claims = { authMethod: 'jwt' as const, userId: subject, subject, email: `${subject}@example.test`, username: subject };
  const created = await createUserDirectory(createUsersStore(runtime.db.knex), { ttlMs: 0, clock }).resolve(claims);
  t.truthy(created);
  const { store, read, release } = heldFirstLookup();
  const directory = createUserDirectory(store, { ttlMs: 5000, clock });
  const first = directory.resolve(claims);
  await read;
  await runtime.db.knex('users').where({ id: created!.userId }).update({ disabled: true });
  directory.invalidate(created!.userId); // the platform id: the directory cannot tell it from the subject
  const after = directory.resolve(claims); // begins after the disabling was announced
  release();
  t.truthy(await first, 'the request that was already waiting gets the row it read');
  t.is(await after, null, 'a disabled user');
  t.is(await directory.resolve(claims), null);
});
