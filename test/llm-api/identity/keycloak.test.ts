import test from 'ava';
import nock from 'nock';
import { randomBytes, randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import { ManualClock, sha256Hex } from '../../../services/kit/index.js';
import { assertError, call, identityHeaders } from './helpers.js';
import { ADMIN, keycloakRealm, REALM, TOKEN_PATH } from './keycloak-realm.js';

// The Keycloak driver, checked with nock against Keycloak's documented admin REST API and the
// realm's OpenID Connect token endpoint. llm-api runs for real (same process: nock intercepts its
// global fetch); calls to 127.0.0.1 (the service itself) pass through.
const KC = 'http://keycloak.test:8085';
const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
const realm = keycloakRealm(test, KC, clock);

const kcTokens = (sub: string, tag: string) => realm.tokens(sub, tag, { scope: 'openid email profile' });

const form = (body: string) => Object.fromEntries(new URLSearchParams(body));
let serviceAccountTokens = 0;
function serviceAccount(scope: nock.Scope) {
  return scope
    .post(TOKEN_PATH, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.grant_type === 'client_credentials' && f.client_id === 'backend' && f.client_secret === 'backend-secret';
    })
    .reply(200, () => {
      serviceAccountTokens++;
      return { access_token: 'admin-token', expires_in: 300, token_type: 'Bearer' };
    });
}
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };

async function kcGuest(kcId: string) {
  const created: any[] = [];
  const scope = nock(KC);
  if (serviceAccountTokens === 0) serviceAccount(scope);
  nock(KC, asAdmin)
    .post(`${ADMIN}/users`, (body) => (created.push(body), true))
    .reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC)
    .post(TOKEN_PATH, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.grant_type === 'password' && f.username === created[0]?.username && f.password === created[0]?.credentials?.[0]?.value && f.client_id === 'backend';
    })
    .reply(200, await kcTokens(kcId, 'login'));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  return { r, created: created[0] };
}

test.serial('guest login creates the Keycloak user (guest=true) and returns the realm tokens', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-000000000001';
  const { r, created } = await kcGuest(kcId);
  t.is(r.status, 201, JSON.stringify(r.body));
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(created.enabled, true);
  t.is(created.emailVerified, false);
  t.deepEqual(created.attributes.guest, ['true']);
  t.regex(created.email, /^guest-[0-9a-f-]{36}@guest\.invalid$/);
  t.is(created.credentials[0].type, 'password');
  t.is(created.credentials[0].temporary, false);
  t.true(created.credentials[0].value.length >= 32);
  t.is(r.body.token_type, 'Bearer');
  t.is(r.body.expires_in, 300);
  t.is(r.body.refresh_token, 'kc-refresh-login');
  t.regex(r.body.user_id, /^user_/);
  // One user, one id: the platform row maps the Keycloak subject (issuer "external", as the kit maps tokens).
  const row = await realm.svc.runtime.db.knex('users').where({ id: r.body.user_id }).first();
  t.is(row.issuer, 'external');
  t.is(row.subject, kcId);
  t.true(row.is_guest);
  t.is(row.email, created.email);
  // Without the embedded issuer there is no local JWKS.
  t.is((await call(realm.svc, 'GET', '/.well-known/jwks.json')).status, 404);
});

test.serial('refresh goes to the token endpoint (refresh_token grant); a rejected token is 401', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-000000000002';
  const { r: login } = await kcGuest(kcId);
  nock(KC)
    .post(TOKEN_PATH, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.grant_type === 'refresh_token' && f.refresh_token === 'kc-refresh-login' && f.client_id === 'backend' && f.client_secret === 'backend-secret';
    })
    .reply(200, await kcTokens(kcId, 'rotated'));
  const r = await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.user_id, login.body.user_id);
  t.is(r.body.refresh_token, 'kc-refresh-rotated');

  nock(KC).post(TOKEN_PATH).reply(400, { error: 'invalid_grant', error_description: 'Token is not active' });
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh-token', { body: { refresh_token: 'kc-refresh-login' } }), 401, 'refresh_token');
  t.true(nock.isDone());
});

test.serial('sign-out revokes the refresh token at the realm (RFC 7009 revoke endpoint); Keycloak down is a 502, not a silent success', async (t) => {
  nock(KC)
    .post(`/realms/${REALM}/protocol/openid-connect/revoke`, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.token === 'kc-refresh-login' && f.token_type_hint === 'refresh_token' && f.client_id === 'backend' && f.client_secret === 'backend-secret';
    })
    .reply(200, '');
  const out = await call(realm.svc, 'POST', '/llm/auth/logout', { body: { refresh_token: 'kc-refresh-login' } });
  t.is(out.status, 200, JSON.stringify(out.body));
  t.deepEqual(out.body, { revoked: true });
  t.true(nock.isDone());

  nock(KC).post(`/realms/${REALM}/protocol/openid-connect/revoke`).replyWithError({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' });
  const down = await call(realm.svc, 'POST', '/auth/logout', { body: { refresh_token: 'kc-refresh-login' } });
  t.is(down.status, 502, JSON.stringify(down.body));
});

/** A refresh token the way Keycloak issues one: an HS512 JWT with the realm's usual claims (some 700+ characters). */
async function kcRefreshToken(sub: string): Promise<string> {
  const issuer = `${KC}/realms/${REALM}`;
  return new SignJWT({ typ: 'Refresh', azp: 'backend', sid: randomUUID(), session_state: randomUUID(), scope: 'openid profile email web-origins acr roles basic' })
    .setProtectedHeader({ alg: 'HS512', typ: 'JWT', kid: randomUUID() })
    .setIssuer(issuer)
    .setAudience(issuer)
    .setSubject(sub)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime('30m')
    .sign(randomBytes(64));
}

test.serial("a refresh token of Keycloak's real size (a signed JWT longer than 512 characters) refreshes and signs out", async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-00000000000a';
  const { r: login } = await kcGuest(kcId);
  const long = await kcRefreshToken(kcId);
  t.true(long.length > 600, `a realistic Keycloak refresh token (${long.length} characters)`);
  nock(KC)
    .post(TOKEN_PATH, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.grant_type === 'refresh_token' && f.refresh_token === long;
    })
    .reply(200, await kcTokens(kcId, 'rotated-long'));
  const r = await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: long } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.user_id, login.body.user_id);

  nock(KC)
    .post(`/realms/${REALM}/protocol/openid-connect/revoke`, (body) => {
      const f = typeof body === 'string' ? form(body) : body;
      return f.token === long && f.token_type_hint === 'refresh_token';
    })
    .reply(200, '');
  const out = await call(realm.svc, 'POST', '/llm/auth/logout', { body: { refresh_token: long } });
  t.is(out.status, 200, JSON.stringify(out.body));
  t.true(nock.isDone());
  // Still bounded: a body-sized string is refused before any call to the realm.
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'x'.repeat(10_000) } }), 400, 'refresh_token');
});

test.serial('upgrade: e-mail checked with GET users?email=&exact=true, then PUT with email, emailVerified:false, guest=false', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-000000000003';
  const { r: login, created } = await kcGuest(kcId);
  const headers = identityHeaders({ id: kcId, email: created.email, username: created.username }, 'jwt');
  const rep = { id: kcId, username: created.username, email: created.email, enabled: true, emailVerified: false, attributes: { guest: ['true'], locale: ['en'] } };
  let put: any;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users`)
    .query({ email: 'grace@example.com', exact: 'true' })
    .reply(200, [])
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, rep)
    .put(`${ADMIN}/users/${kcId}`, (body) => ((put = body), true))
    .reply(204);
  const r = await call(realm.svc, 'POST', '/auth/upgrade', { headers, body: { email: 'grace@example.com', full_name: 'Grace Brewster Hopper' } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(r.body.id, login.body.user_id);
  t.false(r.body.is_guest);
  t.is(put.email, 'grace@example.com');
  // Nobody proved the address (UPGRADE_VERIFIES_EMAIL is off by default): the realm records what the
  // platform answers, so its tokens say email_verified:false and the edge keeps the unverified tier.
  t.false(r.body.email_verified);
  t.is(put.emailVerified, false);
  t.is(put.firstName, 'Grace');
  t.is(put.lastName, 'Brewster Hopper');
  // Attributes are replaced as a whole by PUT: the others are kept.
  t.deepEqual(put.attributes, { guest: ['false'], locale: ['en'] });

  // API keys: the hash is added to and removed from the user's attributes.
  let added: any;
  let removed: any;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { ...rep, attributes: { guest: ['false'] } })
    .put(`${ADMIN}/users/${kcId}`, (body) => ((added = body), true))
    .reply(204);
  const key = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'kc key' } });
  t.is(key.status, 201, JSON.stringify(key.body));
  t.deepEqual(added.attributes.api_key_hashes, [sha256Hex(key.body.key)]);
  t.deepEqual(added.attributes.guest, ['false']);
  t.is((await call(realm.svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key.body.key } })).body.subject, kcId);

  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { ...rep, attributes: { guest: ['false'], api_key_hashes: [sha256Hex(key.body.key), 'other'] } })
    .put(`${ADMIN}/users/${kcId}`, (body) => ((removed = body), true))
    .reply(204);
  t.is((await call(realm.svc, 'DELETE', `/auth/api-keys/${key.body.id}`, { headers })).status, 200);
  t.deepEqual(removed.attributes.api_key_hashes, ['other']);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  // The service-account token was fetched once and reused (it had not expired).
  t.is(serviceAccountTokens, 1);
});

test.serial('upgrade to an e-mail Keycloak already has → 409, and nothing changes locally', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-000000000004';
  const { r: login, created } = await kcGuest(kcId);
  const headers = identityHeaders({ id: kcId, email: created.email, username: created.username }, 'jwt');
  nock(KC, asAdmin).get(`${ADMIN}/users`).query({ email: 'taken@example.com', exact: 'true' }).reply(200, [{ id: 'someone-else', email: 'taken@example.com' }]);
  assertError(t, await call(realm.svc, 'POST', '/auth/upgrade', { headers, body: { email: 'taken@example.com' } }), 409, 'email');
  const row = await realm.svc.runtime.db.knex('users').where({ id: login.body.user_id }).first();
  t.true(row.is_guest);
  t.true(nock.isDone());
});

test.serial('an expired service-account token is renewed; Keycloak down → 502 and no user row', async (t) => {
  clock.advance(10 * 60 * 1000);
  const before = Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c);
  nock(KC).post(TOKEN_PATH).reply(200, { access_token: 'admin-token', expires_in: 300 });
  nock(KC, asAdmin).post(`${ADMIN}/users`).replyWithError({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' });
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  assertError(t, r, 502);
  t.is(r.body.error.code, 'upstream_error');
  t.false(JSON.stringify(r.body).includes('backend-secret'));
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c), before);
});

test.serial('disabling a Keycloak user disables it there too (PUT enabled=false, then logout)', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-000000000005';
  const { r: login } = await kcGuest(kcId);
  const adminUser = await realm.svc.runtime.db.knex('users').insert({ id: 'user_ADMIN0000000000000000000', subject: 'adm', email: 'adm@example.com', is_admin: true }).returning('id');
  let put: any;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { id: kcId, enabled: true, attributes: { guest: ['true'] } })
    .put(`${ADMIN}/users/${kcId}`, (body) => ((put = body), true))
    .reply(204)
    .post(`${ADMIN}/users/${kcId}/logout`)
    .reply(204);
  const r = await call(realm.svc, 'PATCH', `/v1/admin/users/${login.body.user_id}`, {
    headers: identityHeaders({ id: adminUser[0].id }, 'jwt'),
    body: { disabled: true },
  });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(put.enabled, false);
  t.deepEqual(put.attributes, { guest: ['true'] });
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('with Keycloak, password sign-in stays Keycloak’s: login, password change and reset-login answer 400 pointing to it', async (t) => {
  const login = await call(realm.svc, 'POST', '/llm/auth/login', { body: { email: 'someone@example.com', password: 'correct horse battery' } });
  assertError(t, login, 400);
  t.is(login.body.error.code, 'external_identity_provider');
  t.true(login.body.error.message.includes(realm.svc.runtime.config.JWT_ISSUER), login.body.error.message);
  t.false(JSON.stringify(login.body).includes('correct horse'));
  const adminUser = await realm.svc.runtime.db.knex('users').insert({ id: 'user_ADMIN0000000000000000001', subject: 'adm1', email: 'adm1@example.com', is_admin: true }).returning('id');
  const change = await call(realm.svc, 'POST', '/auth/password', { headers: identityHeaders({ id: adminUser[0].id }, 'jwt'), body: { new_password: 'a new long password' } });
  assertError(t, change, 400);
  t.is(change.body.error.code, 'external_identity_provider');
  const reset = await call(realm.svc, 'POST', `/v1/admin/users/${adminUser[0].id}/reset-login`, { headers: identityHeaders({ id: adminUser[0].id }, 'jwt') });
  assertError(t, reset, 400);
  t.is(reset.body.error.code, 'external_identity_provider');
  t.true(nock.isDone(), 'no call reached Keycloak');
});
