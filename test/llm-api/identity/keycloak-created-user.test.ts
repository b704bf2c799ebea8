import test from 'ava';
import nock from 'nock';
import { ManualClock } from '../../../services/kit/index.js';
import { createKeycloakClient } from '../../../services/llm-api/identity/providers/keycloak.js';
import { assertError, call } from './helpers.js';
import { ADMIN, keycloakRealm, TOKEN_PATH } from './keycloak-realm.js';

// The Keycloak driver's reading of the realm's create-user answer (201 with a `Location` header
// naming the new user) and its caching of the service-account token, checked with nock against
// Keycloak's admin REST API and token endpoint.
const KC = 'http://keycloak-created-user.test:8086';
const clock = new ManualClock(Date.UTC(2026, 10, 23, 4, 0, 0));
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };
const realm = keycloakRealm(test, KC, clock);

const grant = (type: string) => (body: any) => (typeof body === 'string' ? new URLSearchParams(body).get('grant_type') : body.grant_type) === type;

test.serial('a create-user answer whose Location header is malformed is a 502; the user is found by username and deleted again', async (t) => {
  const kcId = 'f0000000-0000-4000-8000-000000000001';
  const before = Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c);
  let created: any;
  let deleted = false;
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).optionally().reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, asAdmin)
    .post(`${ADMIN}/users`, (body) => ((created = body), true))
    .reply(201, '', { Location: `${KC}${ADMIN}/users/%E0%A4%A` })
    .get(`${ADMIN}/users`)
    .query((q) => q.username === created?.username && q.exact === 'true')
    .reply(200, () => [{ id: kcId, username: created.username, enabled: true, attributes: created.attributes }])
    .delete(`${ADMIN}/users/${kcId}`)
    .reply(204, () => ((deleted = true), ''));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  assertError(t, r, 502);
  t.is(r.body.error.code, 'upstream_error');
  t.true(deleted, 'the Keycloak user was deleted again');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is(Number((await realm.svc.runtime.db.knex('users').count({ c: '*' }))[0]!.c), before);
});

test.serial("a same-named account holding another platform user's id is not deleted", async (t) => {
  let created: any;
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).optionally().reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });
  nock(KC, asAdmin)
    .post(`${ADMIN}/users`, (body) => ((created = body), true))
    .reply(201, '', { Location: `${KC}${ADMIN}/users/%ZZ` })
    .get(`${ADMIN}/users`)
    .query(true)
    .reply(200, () => [{ id: 'f0000000-0000-4000-8000-000000000002', username: created.username, attributes: { platform_user_id: ['user_SOMEONEELSE'] } }]);
  // Answered if it comes, so a delete would be seen here rather than fail unmatched and be logged away.
  let deleted = false;
  nock(KC, asAdmin)
    .delete(`${ADMIN}/users/f0000000-0000-4000-8000-000000000002`)
    .optionally()
    .reply(204, () => ((deleted = true), ''));
  assertError(t, await call(realm.svc, 'POST', '/llm/auth/guest-login'), 502);
  t.false(deleted, "the other user's account was left alone");
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a service-account token answer without expires_in is cached for a bounded while, then fetched again', async (t) => {
  let fetched = 0;
  nock(KC)
    .post(TOKEN_PATH, grant('client_credentials'))
    .times(2)
    .reply(200, () => (fetched++, { access_token: 'admin-token', token_type: 'Bearer' }));
  nock(KC, asAdmin).get(`${ADMIN}/users`).query(true).times(3).reply(200, []);
  const kc = createKeycloakClient({ url: KC, realm: 'jan', clientId: 'backend', clientSecret: 'backend-secret', timeoutMs: 5_000 }, clock);
  await kc.findByEmail('a@example.com');
  await kc.findByEmail('b@example.com');
  t.is(fetched, 1, 'the second admin call reuses the token');
  clock.advance(61_000);
  await kc.findByEmail('c@example.com');
  t.is(fetched, 2, 'past the default lifetime a new token is fetched');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});
