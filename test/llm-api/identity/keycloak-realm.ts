import type { TestFn } from 'ava';
import nock from 'nock';
import { SignJWT, generateKeyPair, type CryptoKey } from 'jose';
import type { Clock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';

export const REALM = 'jan';
export const TOKEN_PATH = `/realms/${REALM}/protocol/openid-connect/token`;
export const ADMIN = `/admin/realms/${REALM}`;

/**
 * llm-api with its Keycloak driver pointed at `url`, a realm that nock answers (only loopback, the
 * service itself, reaches the network), for one test file of serial tests: its hooks are registered
 * here, and every test's interceptors are cleared after it. `tokens` signs an access token as the
 * realm's token endpoint returns it (an RS256 JWT whose `sub` is the Keycloak user id).
 */
export function keycloakRealm(test: TestFn, url: string, clock: Clock, env: Record<string, string> = {}) {
  let key: CryptoKey;
  const realm = {
    svc: undefined as unknown as TestService,
    async tokens(sub: string, tag: string, extra: Record<string, unknown> = {}) {
      const access = await new SignJWT({ typ: 'Bearer', preferred_username: tag })
        .setProtectedHeader({ alg: 'RS256', kid: 'kc-key' })
        .setIssuer(`${url}/realms/${REALM}`)
        .setSubject(sub)
        .setIssuedAt()
        .setExpirationTime('5m')
        .sign(key);
      return { access_token: access, expires_in: 300, refresh_expires_in: 1800, refresh_token: `kc-refresh-${tag}`, token_type: 'Bearer', ...extra };
    },
  };
  test.before(async () => {
    nock.disableNetConnect();
    nock.enableNetConnect(/127\.0\.0\.1|localhost/);
    key = (await generateKeyPair('RS256')).privateKey as CryptoKey;
    realm.svc = await startTestService(llmApiService, {
      clock,
      env: { KEYCLOAK_URL: url, KEYCLOAK_REALM: REALM, KEYCLOAK_CLIENT_ID: 'backend', KEYCLOAK_CLIENT_SECRET: 'backend-secret', ...env },
    });
  });
  test.after.always(async () => {
    nock.cleanAll();
    nock.enableNetConnect();
    await realm.svc?.close();
  });
  test.afterEach.always(() => nock.cleanAll());
  return realm;
}
