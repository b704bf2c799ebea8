import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { randomBase62 } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { assertError, call, identityHeaders, identityOf } from './helpers.js';

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
  t.is((await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key.body.key } })).status, 200);

  const admin = await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: BOOTSTRAP } });
  t.true(admin.body.is_admin);
  const asAdmin = identityHeaders({ id: admin.body.user_id }, 'apikey');
  t.is((await call(svc, 'PATCH', `/v1/admin/users/${login.body.user_id}`, { headers: asAdmin, body: { disabled: true } })).status, 200);
  assertError(t, await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: key.body.key } }), 401);

  const identity = identityOf(svc.runtime);
  const rotated = await identity.keyRing.rotate();
  t.is(rotated.retired.length, 1);
  t.is((await identity.apiKeys.ensureBootstrapAdmin(BOOTSTRAP)).created, false);
  t.is((await call(svc, 'POST', '/llm/auth/guest-login')).status, 201);
});

test('password sign-in on PGlite: upgrade with a password, login, lockout, change, admin reset', async (t) => {
  const guest = await call(svc, 'POST', '/llm/auth/guest-login');
  const me = identityHeaders({ id: guest.body.user_id }, 'jwt');
  const password = `pw-${randomBase62(16)}`;
  t.is((await call(svc, 'POST', '/auth/upgrade', { headers: me, body: { email: 'lite-signin@example.com', password } })).status, 200);
  const login = await call(svc, 'POST', '/auth/login', { body: { email: 'lite-signin@example.com', password } });
  t.is(login.status, 200, JSON.stringify(login.body));
  for (let i = 0; i < 5; i++) await call(svc, 'POST', '/auth/login', { body: { email: 'lite-signin@example.com', password: 'wrong' } });
  assertError(t, await call(svc, 'POST', '/auth/login', { body: { email: 'lite-signin@example.com', password } }), 429);
  const admin = await call(svc, 'POST', '/internal/auth/validate-api-key', { body: { api_key: BOOTSTRAP } });
  const reset = await call(svc, 'POST', `/v1/admin/users/${guest.body.user_id}/reset-login`, { headers: identityHeaders({ id: admin.body.user_id }, 'apikey') });
  t.is(reset.status, 200, JSON.stringify(reset.body));
  const next = `pw-${randomBase62(16)}`;
  const changed = await call(svc, 'POST', '/auth/password', { headers: me, body: { current_password: reset.body.temporary_password, new_password: next } });
  t.is(changed.status, 200, JSON.stringify(changed.body));
  t.is((await call(svc, 'POST', '/auth/login', { body: { email: 'lite-signin@example.com', password: next } })).status, 200);
});
