import test from 'ava';
import nock from 'nock';
import { ManualClock } from '../../../services/kit/index.js';
import { assertError, call, identityHeaders } from './helpers.js';
import { ADMIN, keycloakRealm, TOKEN_PATH } from './keycloak-realm.js';

// How the Keycloak driver reads the realm's refusals, checked with nock against Keycloak's token
// endpoint (RFC 6749 5.2 error answers) and admin REST API (404 for a user deleted in the realm).
const KC = 'http://keycloak-errors.test:8085';
const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };
const realm = keycloakRealm(test, KC, clock);

const kcTokens = (sub: string, tag: string) => realm.tokens(sub, tag);

const grant = (type: string) => (body: any) => (typeof body === 'string' ? new URLSearchParams(body).get('grant_type') : body.grant_type) === type;

/** A guest created through the driver (POST users, then the password grant). */
async function kcGuest(kcId: string) {
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).optionally().reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, asAdmin).post(`${ADMIN}/users`).reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC).post(TOKEN_PATH, grant('password')).reply(200, await kcTokens(kcId, 'login'));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  if (r.status !== 201) throw new Error(`guest login: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body as { user_id: string; username: string };
}

test.serial("the realm refusing the platform's client on refresh (wrong secret, client not allowed) is a 502, not the user's expired session", async (t) => {
  await kcGuest('e0000000-0000-4000-8000-000000000001');
  // Keycloak's answer to a wrong client secret.
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(401, { error: 'unauthorized_client', error_description: 'Invalid client or Invalid client credentials' });
  const wrongSecret = await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } });
  assertError(t, wrongSecret, 502);
  t.is(wrongSecret.body.error.code, 'upstream_error');
  t.false(JSON.stringify(wrongSecret.body).includes('backend-secret'));
  // A client the realm does not let use this grant.
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(400, { error: 'unauthorized_client', error_description: 'Client not allowed' });
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } }), 502);
  // A 400 that is not an OAuth error answer (a proxy's page) is not the token's fault either.
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(400, '<html>Bad Request</html>', { 'content-type': 'text/html' });
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } }), 502);
  // The token itself refused (expired, revoked, session ended): the caller's 401.
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(400, { error: 'invalid_grant', error_description: 'Session not active' });
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } }), 401, 'refresh_token');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a realm user the platform has not seen yet (signed in on the realm\'s pages) refreshes: 200, its row made as its first API call would', async (t) => {
  const kcId = 'e0000000-0000-4000-8000-0000000000a1';
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(200, await kcTokens(kcId, 'realm-only'));
  const r = await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-realm-signin' } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.refresh_token, 'kc-refresh-realm-only');
  const rows = await realm.svc.runtime.db.knex('users').where({ issuer: 'external', subject: kcId });
  t.is(rows.length, 1);
  t.is(r.body.user_id, rows[0].id);
  t.is(r.body.username, 'realm-only');
  // Its first API call with the realm's token names the same user ("one user, one id").
  const me = await call(realm.svc, 'GET', '/auth/me', { headers: identityHeaders({ id: kcId, username: 'realm-only' }, 'jwt') });
  t.is(me.status, 200, JSON.stringify(me.body));
  t.is(me.body.id, rows[0].id);
  // Disabled on the platform afterwards: the realm's renewal is refused here.
  await realm.svc.runtime.db.knex('users').where({ id: rows[0].id }).update({ disabled: true });
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(200, await kcTokens(kcId, 'after-disable'));
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-realm-only' } }), 401, 'refresh_token');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a refresh answer whose access token is missing or not a JWT is a 502, not a 500', async (t) => {
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(200, { access_token: 'opaque', refresh_token: 'kc-refresh-next', expires_in: 300 });
  const notJwt = await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } });
  assertError(t, notJwt, 502);
  t.is(notJwt.body.error.code, 'upstream_error');
  nock(KC).post(TOKEN_PATH, grant('refresh_token')).reply(200, { refresh_token: 'kc-refresh-next', expires_in: 300 });
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'kc-refresh-login' } }), 502);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('an administrator can disable a user deleted in Keycloak: the platform row is disabled and its API keys stop working', async (t) => {
  const kcId = 'e0000000-0000-4000-8000-000000000002';
  const guest = await kcGuest(kcId);
  // A permanent account (guests have no API keys); as an upgrade leaves it.
  await realm.svc.runtime.db.knex('users').where({ id: guest.user_id }).update({ is_guest: false, email: 'kept@example.com' });
  const headers = identityHeaders({ id: kcId, username: guest.username }, 'jwt');
  // An API key, its hash mirrored in the user's attributes.
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, { id: kcId, enabled: true, attributes: { guest: ['true'] } }).put(`${ADMIN}/users/${kcId}`).reply(204);
  const key = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'outlives the realm' } });
  t.is(key.status, 201, JSON.stringify(key.body));
  t.is((await call(realm.svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key.body.key } })).body.subject, kcId);

  // The user is then deleted in Keycloak: the realm answers 404 for it.
  const admin = await realm.svc.runtime.db.knex('users').insert({ id: 'user_ADMINERR0000000000000000', subject: 'adm-err', email: 'adm-err@example.com', is_admin: true }).returning('id');
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(404, { error: 'User not found' });
  const r = await call(realm.svc, 'PATCH', `/v1/admin/users/${guest.user_id}`, { headers: identityHeaders({ id: admin[0].id }, 'jwt'), body: { disabled: true } });
  t.is(r.status, 200, JSON.stringify(r.body));
  t.true(r.body.disabled);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.true((await realm.svc.runtime.db.knex('users').where({ id: guest.user_id }).first()).disabled);
  const validate = await call(realm.svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key.body.key } });
  t.not(validate.body.subject, kcId, JSON.stringify(validate.body));
});

test.serial('a guest the realm will not sign in is deleted there again, and no platform row is left (502)', async (t) => {
  const kcId = 'e0000000-0000-4000-8000-000000000003';
  const before = Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c);
  let deleted = false;
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).optionally().reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, asAdmin)
    .post(`${ADMIN}/users`)
    .reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` })
    .delete(`${ADMIN}/users/${kcId}`)
    .reply(204, () => ((deleted = true), ''));
  // Keycloak's answer when the realm gives new accounts a required action.
  nock(KC).post(TOKEN_PATH, grant('password')).reply(400, { error: 'invalid_grant', error_description: 'Account is not fully set up' });
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  assertError(t, r, 502);
  t.is(r.body.error.code, 'upstream_error');
  t.true(deleted, 'the Keycloak user was deleted again');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c), before);
  t.is(await realm.svc.runtime.db.knex('users').where({ subject: kcId }).first(), undefined);
});

test.serial("the upgrade's and the API-key mirror's GET + PUT never write `enabled`: a disable made between their GET and PUT is not undone", async (t) => {
  const kcId = 'e0000000-0000-4000-8000-000000000004';
  const guest = await kcGuest(kcId);
  const headers = identityHeaders({ id: kcId, username: guest.username }, 'jwt');
  // Each GET answers the user as it was (enabled); the account is disabled (by an administrator,
  // here or in the realm) before the PUT lands. Keycloak keeps a field the PUT omits as it is.
  const puts: any[] = [];
  const stale = { id: kcId, username: guest.username, enabled: true, emailVerified: false, attributes: { guest: ['true'] } };
  nock(KC, asAdmin)
    .get(`${ADMIN}/users`)
    .query(true)
    .reply(200, [])
    .get(`${ADMIN}/users/${kcId}`)
    .times(3)
    .reply(200, stale)
    .put(`${ADMIN}/users/${kcId}`, (body) => (puts.push(body), true))
    .times(3)
    .reply(204);
  const up = await call(realm.svc, 'POST', '/auth/upgrade', { headers, body: { email: 'keeps-disabled@example.com' } });
  t.is(up.status, 200, JSON.stringify(up.body));
  const key = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'mirror' } });
  t.is(key.status, 201, JSON.stringify(key.body));
  t.is((await call(realm.svc, 'DELETE', `/auth/api-keys/${key.body.id}`, { headers })).status, 200);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(puts.length, 3);
  for (const put of puts) t.false('enabled' in put, JSON.stringify(put));
  // What they are for is still written.
  t.is(puts[0].email, 'keeps-disabled@example.com');
  t.deepEqual(puts[1].attributes.api_key_hashes.length, 1);
  t.deepEqual(puts[2].attributes.api_key_hashes, []);
});

test.serial('an upgrade whose username the realm already has (another Keycloak account) is a 409 naming `username`, and the guest stays a guest', async (t) => {
  const kcId = 'e0000000-0000-4000-8000-000000000005';
  const guest = await kcGuest(kcId);
  const headers = identityHeaders({ id: kcId, username: guest.username }, 'jwt');
  nock(KC, asAdmin)
    .get(`${ADMIN}/users`)
    .query(true)
    .reply(200, [])
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { id: kcId, username: guest.username, enabled: true, attributes: { guest: ['true'] } })
    .put(`${ADMIN}/users/${kcId}`)
    .reply(409, { errorMessage: 'User exists with same username' });
  const r = await call(realm.svc, 'POST', '/auth/upgrade', { headers, body: { email: 'fresh@example.com', username: 'realm_only_name' } });
  assertError(t, r, 409, 'username');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.true((await realm.svc.runtime.db.knex('users').where({ id: guest.user_id }).first()).is_guest);

  // The realm's e-mail conflict still names `email`.
  nock(KC, asAdmin)
    .get(`${ADMIN}/users`)
    .query(true)
    .reply(200, [])
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { id: kcId, username: guest.username, enabled: true, attributes: { guest: ['true'] } })
    .put(`${ADMIN}/users/${kcId}`)
    .reply(409, { errorMessage: 'User exists with same email' });
  assertError(t, await call(realm.svc, 'POST', '/auth/upgrade', { headers, body: { email: 'fresh@example.com', username: 'realm_only_name' } }), 409, 'email');
});

test.serial('a cached service-account token the realm refuses before its expiry (Keycloak restarted) is renewed and the call made once more', async (t) => {
  const kcId = 'e0000000-0000-4000-8000-000000000006';
  await kcGuest('e0000000-0000-4000-8000-000000000007'); // the service-account token is cached
  nock.cleanAll();
  let renewed = 0;
  nock(KC, asAdmin).post(`${ADMIN}/users`).reply(401, { error: 'HTTP 401 Unauthorized' });
  nock(KC)
    .post(TOKEN_PATH, grant('client_credentials'))
    .reply(200, () => (renewed++, { access_token: 'admin-token-2', expires_in: 3600, token_type: 'Bearer' }));
  nock(KC, { reqheaders: { authorization: 'Bearer admin-token-2' } }).post(`${ADMIN}/users`).reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC).post(TOKEN_PATH, grant('password')).reply(200, await kcTokens(kcId, 'after-restart'));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  t.is(r.status, 201, JSON.stringify(r.body));
  t.is(renewed, 1);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is((await realm.svc.runtime.db.knex('users').where({ id: r.body.user_id }).first()).subject, kcId);

  // A token just fetched that the realm refuses is not retried in a loop: one 502.
  nock.cleanAll();
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).reply(200, { access_token: 'admin-token-3', expires_in: 3600 });
  nock(KC).post(`${ADMIN}/users`).times(2).reply(401, {});
  clock.advance(2 * 3600 * 1000); // the cached one expired: the next call fetches a new one
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/guest-login'), 502);
  t.is(nock.pendingMocks().length, 1, 'one admin call only');
});

test.serial('a renewed service-account token the realm refuses too is not kept: the next call asks for a new one first', async (t) => {
  await kcGuest('e0000000-0000-4000-8000-000000000008'); // a service-account token is cached
  nock.cleanAll();
  // The cached token is refused, and so is the one renewed for the retry.
  nock(KC, asAdmin).post(`${ADMIN}/users`).reply(401, {});
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).reply(200, { access_token: 'admin-token-refused', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, { reqheaders: { authorization: 'Bearer admin-token-refused' } }).post(`${ADMIN}/users`).reply(401, {});
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/guest-login'), 502);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));

  // The next call fetches a token before its admin call: only a request with the new one is answered.
  nock.cleanAll();
  const kcId = 'e0000000-0000-4000-8000-000000000009';
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).reply(200, { access_token: 'admin-token-fresh', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, { reqheaders: { authorization: 'Bearer admin-token-fresh' } }).post(`${ADMIN}/users`).reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC).post(TOKEN_PATH, grant('password')).reply(200, await kcTokens(kcId, 'after-refusals'));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  t.is(r.status, 201, JSON.stringify(r.body));
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});
