import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import { FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS } from '../../../services/llm-api/identity/passwords/domain.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, type TestUser } from '../../helpers/users.js';
import { assertError, call, identityHeaders, identityOf } from './helpers.js';

// An account without a password (upgraded without one) has nothing to re-enter: its first password
// is set only with an access token issued in the last few minutes, so a token taken from a request
// cannot be turned into a password (ending the owner's sessions) for the rest of its lifetime.
const clock = new ManualClock(Date.UTC(2026, 11, 7, 10, 0, 0));
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
});
test.after.always(() => svc?.close());

const accessToken = async (user: TestUser) => (await identityOf(svc.runtime).issuer!.sign({ ...user, is_guest: false })).token;
const setFirst = (user: TestUser, token: string | undefined, password = 'a first long password') =>
  call(svc, 'POST', '/auth/password', {
    headers: { ...identityHeaders(user, 'jwt'), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: { new_password: password },
  });

test.serial('a first password with an access token older than the limit is a 401 asking to refresh; a fresh one sets it', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const old = await accessToken(user);
  clock.advance((FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS + 1) * 1000);
  // Still within its 900-second lifetime (the edge would let it through), but not recent.
  const stale = await setFirst(user, old);
  assertError(t, stale, 401, 'Authorization');
  t.is(stale.body.error.code, 'reauthentication_required');
  t.is(await svc.runtime.db.knex('identity_passwords').where({ user_id: user.id }).first(), undefined, 'no password stored');

  const fresh = await setFirst(user, await accessToken(user));
  t.is(fresh.status, 200, JSON.stringify(fresh.body));
  t.truthy(await svc.runtime.db.knex('identity_passwords').where({ user_id: user.id }).first());
});

test.serial("a first password without the bearer token, with another user's token or with one that is not the issuer's is a 401", async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const other = await createTestUser(svc.runtime.db.knex);
  for (const token of [undefined, await accessToken(other), 'not.a.jwt']) {
    const r = await setFirst(user, token);
    assertError(t, r, 401, 'Authorization');
    t.is(r.body.error.code, 'reauthentication_required');
  }
  t.is(await svc.runtime.db.knex('identity_passwords').where({ user_id: user.id }).first(), undefined);
});
