import test from 'ava';
import nock from 'nock';
import { ManualClock, sha256Hex } from '../../../services/kit/index.js';
import { USER_RECHECK_MS } from '../../../services/llm-api/identity/providers/keycloak.js';
import { waitFor } from '../../helpers/wait.js';
import { call, identityHeaders } from './helpers.js';
import { ADMIN, keycloakRealm, TOKEN_PATH } from './keycloak-realm.js';

// What the platform and the realm agree on when the realm changes on its own (an administrator in
// Keycloak's console), when two changes of one user's key list race, and when guest creation fails
// halfway. Keycloak is nock answering its documented admin REST API (GET/PUT/DELETE users/{id}).
const KC = 'http://keycloak-consistency.test:8085';
const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };
const realm = keycloakRealm(test, KC, clock);

const grant = (type: string) => (body: any) => (typeof body === 'string' ? new URLSearchParams(body).get('grant_type') : body.grant_type) === type;
const serviceAccount = () =>
  nock(KC).post(TOKEN_PATH, grant('client_credentials')).optionally().reply(200, { access_token: 'admin-token', expires_in: 3600, token_type: 'Bearer' });

/** A guest created through the driver (POST users, then the password grant). */
async function kcGuest(kcId: string) {
  serviceAccount();
  nock(KC, asAdmin).post(`${ADMIN}/users`).reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC).post(TOKEN_PATH, grant('password')).reply(200, await realm.tokens(kcId, 'login'));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  if (r.status !== 201) throw new Error(`guest login: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body as { user_id: string; username: string };
}

/** A permanent account (as an upgrade leaves it) holding one API key, its hash mirrored in the realm. */
async function accountWithKey(kcId: string) {
  const guest = await kcGuest(kcId);
  await realm.svc.runtime.db.knex('users').where({ id: guest.user_id }).update({ is_guest: false, email: `${kcId}@example.com` });
  const headers = identityHeaders({ id: kcId, username: guest.username }, 'jwt');
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, { id: kcId, enabled: true, attributes: {} }).put(`${ADMIN}/users/${kcId}`).reply(204);
  const key = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'realm-checked' } });
  if (key.status !== 201) throw new Error(`key: ${key.status} ${JSON.stringify(key.body)}`);
  return { userId: guest.user_id, headers, key: key.body.key as string };
}

const validate = (key: string) => call(realm.svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key } });

test.serial('a user disabled only in Keycloak loses its API keys at the next check; the answer is cached between checks', async (t) => {
  const kcId = 'c0000000-0000-4000-8000-000000000001';
  const { key } = await accountWithKey(kcId);
  // The first validation has the realm asked; the next ones within the interval do not.
  let reads = 0;
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, () => (reads++, { id: kcId, enabled: true }));
  t.is((await validate(key)).status, 200);
  await waitFor(() => reads === 1, 10_000, 'the realm asked');
  t.is((await validate(key)).status, 200);
  t.is((await validate(key)).status, 200);
  t.is(reads, 1);

  // A realm administrator disables the user in Keycloak's console.
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, () => (reads++, { id: kcId, enabled: false }));
  clock.advance(USER_RECHECK_MS - 1);
  t.is((await validate(key)).status, 200, 'still within the interval: the last answer holds');
  t.is(reads, 1);
  clock.advance(1);
  // Past the interval the last answer still stands while the realm is asked again, then the new one.
  const refused = await waitFor(async () => {
    const r = await validate(key);
    return r.status === 401 ? r : undefined;
  }, 10_000, 'the key refused');
  t.is(refused.body.error.param, 'api_key');
  t.is(reads, 2);

  // Keycloak unreachable afterwards: a user the realm said was disabled stays refused.
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).replyWithError({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' });
  clock.advance(USER_RECHECK_MS);
  t.is((await validate(key)).status, 401);
  await waitFor(() => nock.isDone(), 10_000, 'the realm asked again');
  t.is((await validate(key)).status, 401);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a user deleted only in Keycloak (404) loses its API keys; a realm that cannot be asked about an unknown user leaves the key working', async (t) => {
  const deleted = 'c0000000-0000-4000-8000-000000000002';
  const gone = await accountWithKey(deleted);
  nock(KC, asAdmin).get(`${ADMIN}/users/${deleted}`).reply(404, { error: 'User not found' });
  await waitFor(async () => (await validate(gone.key)).status === 401, 10_000, 'the deleted user\'s key refused');

  const unknown = 'c0000000-0000-4000-8000-000000000003';
  const kept = await accountWithKey(unknown);
  nock(KC, asAdmin).get(`${ADMIN}/users/${unknown}`).replyWithError({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' });
  t.is((await validate(kept.key)).status, 200);
  await waitFor(() => nock.isDone(), 10_000, 'the realm asked');
  const r = await validate(kept.key);
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.subject, unknown);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('a realm that does not answer holds a validation only briefly (STANDING_WAIT_MS): the last answer stands meanwhile', async (t) => {
  const kcId = 'c0000000-0000-4000-8000-000000000006';
  const { key } = await accountWithKey(kcId);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let asked = 0;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users/${kcId}`)
    .reply(async () => {
      asked++;
      await held;
      return [200, { id: kcId, enabled: false }];
    });
  // Answered while the realm's read is still held (before, the validation waited for it, past the edge's timeout).
  t.is((await validate(key)).status, 200);
  await waitFor(() => asked === 1, 10_000, 'the realm asked');
  t.is((await validate(key)).status, 200);
  t.is(asked, 1, 'one read of the realm at a time');
  release();
  await waitFor(async () => (await validate(key)).status === 401, 10_000, 'the realm\'s answer applied');
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('an answer older than two intervals (an idle key) is not trusted: the validation waits for the realm', async (t) => {
  const kcId = 'c0000000-0000-4000-8000-000000000007';
  const { key } = await accountWithKey(kcId);
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, { id: kcId, enabled: true });
  t.is((await validate(key)).status, 200);
  // A day idle, then disabled in the realm: the day-old "enabled" does not let the next use through.
  clock.advance(86_400_000);
  nock(KC, asAdmin).get(`${ADMIN}/users/${kcId}`).reply(200, { id: kcId, enabled: false });
  t.is((await validate(key)).status, 401);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
});

test.serial('two API keys of one user deleted at once both leave the realm attribute (no lost update)', async (t) => {
  const kcId = 'c0000000-0000-4000-8000-000000000004';
  const guest = await kcGuest(kcId);
  await realm.svc.runtime.db.knex('users').where({ id: guest.user_id }).update({ is_guest: false, email: 'race@example.com' });
  const headers = identityHeaders({ id: kcId, username: guest.username }, 'jwt');

  // The realm's user, as Keycloak keeps it: GET answers the stored representation, PUT replaces it.
  let stored: { id: string; enabled: boolean; attributes: Record<string, string[]> } = { id: kcId, enabled: true, attributes: {} };
  let removing = false;
  let reads = 0;
  let releaseFirst!: () => void;
  const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
  nock(KC, asAdmin)
    .persist()
    .get(`${ADMIN}/users/${kcId}`)
    .reply(async () => {
      const snapshot = structuredClone(stored);
      // The first read of the removals is answered only once the second removal is either reading
      // too (the race) or waiting for the user row's lock (serialised).
      if (removing && ++reads === 1) await firstHeld;
      return [200, snapshot];
    })
    .put(`${ADMIN}/users/${kcId}`)
    .reply((_uri, body) => {
      stored = body as typeof stored;
      return [204, ''];
    });
  const one = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'one' } });
  const two = await call(realm.svc, 'POST', '/auth/api-keys', { headers, body: { name: 'two' } });
  t.is(one.status, 201);
  t.is(two.status, 201);
  t.deepEqual([...stored.attributes.api_key_hashes].sort(), [sha256Hex(one.body.key), sha256Hex(two.body.key)].sort());

  removing = true;
  const deletes = [one, two].map((k) => call(realm.svc, 'DELETE', `/auth/api-keys/${k.body.id}`, { headers }));
  const waitingForRow = async () =>
    (await realm.svc.runtime.db.knex.raw("select 1 from pg_locks where locktype = 'tuple' and relation = to_regclass('users')")).rows.length > 0;
  await waitFor(async () => reads >= 2 || (await waitingForRow()), 10_000, 'the second removal reading or waiting');
  releaseFirst();
  const answers = await Promise.all(deletes);
  t.deepEqual(answers.map((a) => a.status), [200, 200]);
  t.deepEqual(stored.attributes.api_key_hashes, []);
  nock.cleanAll();
});

test.serial('a guest the platform cannot record is deleted from the realm again', async (t) => {
  const kcId = 'c0000000-0000-4000-8000-000000000005';
  // The realm hands out an id the platform already maps (so the platform's insert fails).
  await realm.svc.runtime.db.knex('users').insert({ id: 'user_CONSISTENCY000000000000', issuer: 'external', subject: kcId, email: null });
  serviceAccount();
  nock(KC, asAdmin).post(`${ADMIN}/users`).reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC).post(TOKEN_PATH, grant('password')).reply(200, await realm.tokens(kcId, 'orphan'));
  let deleted = 0;
  nock(KC, asAdmin).delete(`${ADMIN}/users/${kcId}`).reply(204, () => (deleted++, ''));
  const r = await call(realm.svc, 'POST', '/llm/auth/guest-login');
  t.not(r.status, 201, JSON.stringify(r.body));
  t.truthy(r.body.error, JSON.stringify(r.body));
  t.is(deleted, 1);
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.is((await realm.svc.runtime.db.knex('users').where({ subject: kcId })).length, 1, 'only the row that was there before');
});
