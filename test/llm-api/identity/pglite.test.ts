import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { randomBase62 } from '../../../services/kit/index.js';
import { createIdentity } from '../../../services/llm-api/identity/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { assertError, call, identityHeaders } from './helpers.js';

// The embedded default of `npm start`: PGlite (one connection) and the PostgreSQL queue. Every
// transactional identity path runs once here, so a query outside its transaction (which would
// wait forever for PGlite's single connection) cannot slip in unnoticed.
const dir = mkdtempSync(join(tmpdir(), 'identity-pglite-'));
const BOOTSTRAP = `sk_${randomBase62(32)}`;
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, {
    bus: 'pg',
    env: { DATABASE_URL: undefined, DATA_DIR: dir, BOOTSTRAP_ADMIN_API_KEY: BOOTSTRAP },
  });
});
test.after.always(async () => {
  await svc?.close();
  rmSync(dir, { recursive: true, force: true });
});

test('guest → refresh → reuse → upgrade → key → validate → disable, and rotation, on PGlite', async (t) => {
  t.is(svc.runtime.db.driver, 'pglite');
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  t.is(login.status, 201, JSON.stringify(login.body));
  const me = identityHeaders({ id: login.body.user_id }, 'jwt');

  const refreshed = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(refreshed.status, 200);
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } }), 401);

  t.is((await call(svc, 'POST', '/auth/upgrade', { headers: me, body: { email: 'lite@example.com' } })).status, 200);
  const key = await call(svc, 'POST', '/auth/api-keys', { headers: me, body: { name: 'lite' } });
  t.is(key.status, 201, JSON.stringify(key.body));
  t.is((await call(svc, 'POST', '/auth/validate-api-key', { body: { api_key: key.body.key } })).status, 200);

  const admin = await call(svc, 'POST', '/auth/validate-api-key', { body: { api_key: BOOTSTRAP } });
  t.true(admin.body.is_admin);
  const asAdmin = identityHeaders({ id: admin.body.user_id }, 'apikey');
  t.is((await call(svc, 'PATCH', `/v1/admin/users/${login.body.user_id}`, { headers: asAdmin, body: { disabled: true } })).status, 200);
  assertError(t, await call(svc, 'POST', '/auth/validate-api-key', { body: { api_key: key.body.key } }), 401);

  const identity = createIdentity(svc.ctx);
  const rotated = await identity.keyRing.rotate();
  t.is(rotated.retired.length, 1);
  t.is((await identity.apiKeys.ensureBootstrapAdmin(BOOTSTRAP)).created, false);
  t.is((await call(svc, 'POST', '/llm/auth/guest-login')).status, 201);
});
