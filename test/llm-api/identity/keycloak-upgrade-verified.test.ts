import test from 'ava';
import nock from 'nock';
import { SignJWT, generateKeyPair, type CryptoKey } from 'jose';
import { ManualClock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { call, identityHeaders } from './helpers.js';

// The Keycloak driver's upgrade records at the realm the verification the platform decided
// (UPGRADE_VERIFIES_EMAIL), never more: the realm's tokens carry it as email_verified, which the
// edge reads for the account's tier. Off (the default) is checked in keycloak.test.ts; here it is
// on, so the realm is told the address is verified. Keycloak is mocked with nock, using its
// documented admin REST API and token endpoint.
const KC = 'http://keycloak-verified.test:8085';
const REALM = 'jan';
const TOKEN_PATH = `/realms/${REALM}/protocol/openid-connect/token`;
const ADMIN = `/admin/realms/${REALM}`;
const clock = new ManualClock(Date.UTC(2026, 11, 1, 9, 0, 0));
let svc: TestService;
let kcKey: CryptoKey;

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/127\.0\.0\.1|localhost/);
  kcKey = (await generateKeyPair('RS256')).privateKey as CryptoKey;
  svc = await startTestService(llmApiService, {
    clock,
    env: { KEYCLOAK_URL: KC, KEYCLOAK_REALM: REALM, KEYCLOAK_CLIENT_ID: 'backend', KEYCLOAK_CLIENT_SECRET: 'backend-secret', UPGRADE_VERIFIES_EMAIL: 'true' },
  });
});
test.after.always(async () => {
  nock.cleanAll();
  nock.enableNetConnect();
  await svc?.close();
});

const form = (body: unknown) => (typeof body === 'string' ? Object.fromEntries(new URLSearchParams(body)) : (body as Record<string, string>));
const asAdmin = { reqheaders: { authorization: 'Bearer admin-token' } };

test('with UPGRADE_VERIFIES_EMAIL=true the upgrade PUTs emailVerified:true, as the platform answers', async (t) => {
  const kcId = 'a1b2c3d4-0000-4000-8000-0000000000f1';
  const access = await new SignJWT({ typ: 'Bearer' })
    .setProtectedHeader({ alg: 'RS256', kid: 'kc-key' })
    .setIssuer(`${KC}/realms/${REALM}`)
    .setSubject(kcId)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(kcKey);
  let created: any;
  nock(KC)
    .post(TOKEN_PATH, (body) => form(body).grant_type === 'client_credentials')
    .reply(200, { access_token: 'admin-token', expires_in: 300, token_type: 'Bearer' });
  nock(KC, asAdmin)
    .post(`${ADMIN}/users`, (body) => ((created = body), true))
    .reply(201, '', { Location: `${KC}${ADMIN}/users/${kcId}` });
  nock(KC)
    .post(TOKEN_PATH, (body) => form(body).grant_type === 'password')
    .reply(200, { access_token: access, expires_in: 300, refresh_expires_in: 1800, refresh_token: 'kc-refresh', token_type: 'Bearer' });
  const guest = await call(svc, 'POST', '/llm/auth/guest-login');
  t.is(guest.status, 201, JSON.stringify(guest.body));
  t.is(created.emailVerified, false, 'a guest is never verified');

  let put: any;
  nock(KC, asAdmin)
    .get(`${ADMIN}/users`)
    .query({ email: 'ada@example.com', exact: 'true' })
    .reply(200, [])
    .get(`${ADMIN}/users/${kcId}`)
    .reply(200, { id: kcId, username: created.username, email: created.email, enabled: true, emailVerified: false, attributes: { guest: ['true'] } })
    .put(`${ADMIN}/users/${kcId}`, (body) => ((put = body), true))
    .reply(204);
  const headers = identityHeaders({ id: kcId, email: created.email, username: created.username }, 'jwt');
  const upgraded = await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'ada@example.com' } });
  t.is(upgraded.status, 200, JSON.stringify(upgraded.body));
  t.true(nock.isDone(), nock.pendingMocks().join(', '));
  t.true(upgraded.body.email_verified);
  t.is(put.email, 'ada@example.com');
  t.is(put.emailVerified, true);
  t.deepEqual(put.attributes, { guest: ['false'] });
});
