import test from 'ava';
import nock from 'nock';
import { ApiError, ManualClock, TrustedEndpointError } from '../../../services/kit/index.js';
import { createKeycloakClient } from '../../../services/llm-api/identity/providers/keycloak.js';

// The Keycloak driver's calls go through the kit's trusted-endpoint client (nock answers as
// Keycloak's token endpoint and admin REST API do): the realm's paths below KEYCLOAK_URL, and an
// answer that is too large or not JSON is "the identity provider is unavailable", never a 500.
const KC = 'http://keycloak.answers.test:8085';
const TOKEN_PATH = '/auth/realms/jan/protocol/openid-connect/token';
const settings = { url: `${KC}/auth/`, realm: 'jan', clientId: 'backend', clientSecret: 'backend-secret', timeoutMs: 5000 };

test.before(() => nock.disableNetConnect());
test.after.always(() => {
  nock.cleanAll();
  nock.enableNetConnect();
});
test.afterEach.always(() => nock.cleanAll());

test.serial('admin calls use the service-account token, below the configured base URL', async (t) => {
  nock(KC).post(TOKEN_PATH, { grant_type: 'client_credentials', client_id: 'backend', client_secret: 'backend-secret' }).reply(200, { access_token: 'admin-token', expires_in: 300 });
  nock(KC, { reqheaders: { authorization: 'Bearer admin-token' } })
    .get('/auth/admin/realms/jan/users')
    .query({ email: 'a@example.org', exact: 'true' })
    .reply(200, [{ id: 'kc-1', email: 'a@example.org' }]);
  const kc = createKeycloakClient(settings, new ManualClock());
  t.deepEqual(await kc.findByEmail('a@example.org'), [{ id: 'kc-1', email: 'a@example.org' }]);
});

test.serial('an oversized token answer is refused: the identity provider is unavailable (502)', async (t) => {
  nock(KC).post(TOKEN_PATH).reply(200, `{"access_token":"${'a'.repeat(2 * 1024 * 1024)}","expires_in":300}`);
  const kc = createKeycloakClient(settings, new ManualClock());
  const error = await t.throwsAsync(kc.getUser('kc-1'), { instanceOf: ApiError });
  t.like(error, { status: 502, message: 'The identity provider is unavailable (service-account token)' });
  t.true(error!.cause instanceof TrustedEndpointError);
  t.is((error!.cause as TrustedEndpointError).failure, 'too_large');
});

test.serial('an answer that is not JSON is a 502 naming the call', async (t) => {
  nock(KC).post(TOKEN_PATH).reply(200, { access_token: 'admin-token', expires_in: 300 });
  nock(KC).get('/auth/admin/realms/jan/users/kc-1').reply(200, '<html>login</html>', { 'content-type': 'text/html' });
  const kc = createKeycloakClient(settings, new ManualClock());
  const error = await t.throwsAsync(kc.getUser('kc-1'), { instanceOf: ApiError });
  t.like(error, { status: 502, message: 'The identity provider is unavailable (read user: the answer is not JSON)' });
});
