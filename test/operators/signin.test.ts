import test from 'ava';
import OpenAI, { AuthenticationError } from 'openai';
import { ManualClock, randomBase62 } from '../../services/kit/index.js';
import type { TestPlatform } from '../helpers/platform.js';
import { platformForFile } from '../helpers/platform-per-file.js';

// Password sign-in of the embedded issuer, through the edge: upgrade with a password, login,
// lockout on a manual clock, password change, the administrator's reset. Tokens are used with the
// official openai SDK.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const MAX_FAILURES = 3;
const LOCKOUT_SECONDS = 600;
const clock = new ManualClock(Date.now());
let p: TestPlatform;

platformForFile(
  {
    clock,
    env: {
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      LOGIN_MAX_FAILURES: String(MAX_FAILURES),
      LOGIN_LOCKOUT_SECONDS: String(LOCKOUT_SECONDS),
      LLM_HEALTH_PROBE_INTERVAL_MS: '0',
    },
  },
  (started) => (p = started),
);

interface Reply {
  status: number;
  body: any;
  headers: Headers;
}

async function post(path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${p.url}${path}`, {
    method: 'POST',
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const newEmail = () => `user-${randomBase62(8).toLowerCase()}@example.com`;
const newPassword = () => `pw-${randomBase62(20)}`;

/** A guest upgraded to an account with a password: what the console's sign-up does. */
async function signUp(email = newEmail(), password = newPassword()) {
  const guest = await post('/llm/auth/guest-login');
  const upgraded = await post('/llm/auth/upgrade', { email, password }, bearer(guest.body.access_token));
  if (upgraded.status !== 200) throw new Error(`upgrade: ${upgraded.status} ${JSON.stringify(upgraded.body)}`);
  return { email, password, userId: guest.body.user_id as string, guestTokens: guest.body };
}

test.serial('login with the right password returns the guest-login body, and its token calls /v1/models with the SDK', async (t) => {
  const { email, password, userId, guestTokens } = await signUp();
  // The e-mail is matched case-insensitively.
  const login = await post('/llm/auth/login', { email: email.toUpperCase(), password });
  t.is(login.status, 200, JSON.stringify(login.body));
  t.deepEqual(Object.keys(login.body).sort(), Object.keys(guestTokens).sort(), 'the same body as guest login');
  t.is(login.body.user_id, userId);
  t.is(login.body.token_type, 'Bearer');
  t.false(JSON.stringify(login.body).includes(password));

  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: login.body.access_token, maxRetries: 0 });
  const models = await client.models.list();
  t.true(Array.isArray(models.data));
  const me = await fetch(`${p.url}/llm/auth/me`, { headers: bearer(login.body.access_token) }).then((r) => r.json() as Promise<any>);
  t.is(me.email, email);
  t.false(me.is_guest);
  t.false(me.email_verified, 'UPGRADE_VERIFIES_EMAIL is off by default');
  // The refresh token of a password sign-in rotates like any other.
  const refreshed = await post('/llm/auth/refresh', { refresh_token: login.body.refresh_token });
  t.is(refreshed.status, 200);
  // /auth/login without the /llm prefix is the same route.
  t.is((await post('/auth/login', { email, password })).status, 200);
});

test.serial('a wrong password and an unknown e-mail get the same generic 401', async (t) => {
  const { email } = await signUp();
  const wrong = await post('/llm/auth/login', { email, password: 'not-the-password' });
  const unknown = await post('/llm/auth/login', { email: newEmail(), password: 'not-the-password' });
  for (const reply of [wrong, unknown]) {
    t.is(reply.status, 401);
    t.is(reply.body.error.message, 'Invalid e-mail or password');
    t.is(reply.body.error.code, 'invalid_credentials');
    t.false(JSON.stringify(reply.body).includes('not-the-password'));
  }
  // With the SDK's own error class, as a client sees it.
  const sdk = new OpenAI({ baseURL: `${p.url}/llm`, apiKey: 'none', maxRetries: 0, defaultHeaders: { Authorization: null } });
  await t.throwsAsync(sdk.post('/auth/login', { body: { email, password: 'still-wrong' } }), { instanceOf: AuthenticationError });
  // A guest's generated address has no password: the same answer.
  const guest = await post('/llm/auth/guest-login');
  const guestRow = await p.runtime.db.knex('users').where({ id: guest.body.user_id }).first();
  const asGuest = await post('/llm/auth/login', { email: guestRow.email, password: 'anything-at-all' });
  t.is(asGuest.status, 401);
  t.is(asGuest.body.error.message, 'Invalid e-mail or password');
});

test.serial('repeated failures lock the address (429 with the retry time), even for the right password; past the window it unlocks', async (t) => {
  const { email, password } = await signUp();
  for (let i = 1; i < MAX_FAILURES; i++) t.is((await post('/llm/auth/login', { email, password: `wrong-${i}` })).status, 401);
  const locking = await post('/llm/auth/login', { email, password: 'wrong-last' });
  t.is(locking.status, 429);
  t.is(locking.body.error.code, 'login_locked');
  t.is(locking.body.error.type, 'rate_limit_error');
  t.is(locking.headers.get('retry-after'), String(LOCKOUT_SECONDS));
  t.regex(locking.body.error.message, /locked until \d{4}-\d\d-\d\dT.*retry in 600 seconds/);

  clock.advance(60_000);
  const locked = await post('/llm/auth/login', { email, password });
  t.is(locked.status, 429, 'the right password does not open a locked address');
  t.is(locked.headers.get('retry-after'), String(LOCKOUT_SECONDS - 60));

  // An address nobody holds locks the same way: the lockout does not tell them apart.
  const nobody = newEmail();
  for (let i = 1; i < MAX_FAILURES; i++) t.is((await post('/llm/auth/login', { email: nobody, password: 'guess' })).status, 401);
  t.is((await post('/llm/auth/login', { email: nobody, password: 'guess' })).status, 429);

  clock.advance(LOCKOUT_SECONDS * 1000);
  const open = await post('/llm/auth/login', { email, password });
  t.is(open.status, 200, JSON.stringify(open.body));
  // A success clears the count: the next failures start again from zero.
  t.is((await post('/llm/auth/login', { email, password: 'wrong-again' })).status, 401);
  t.is((await post('/llm/auth/login', { email, password })).status, 200);
});

test.serial('/auth/password changes the password: the old one stops working, other sessions end, the caller gets new tokens', async (t) => {
  const { email, password } = await signUp();
  const first = await post('/llm/auth/login', { email, password });
  const other = await post('/llm/auth/login', { email, password });
  const next = newPassword();

  const short = await post('/llm/auth/password', { current_password: password, new_password: 'Zq9-tiny' }, bearer(first.body.access_token));
  t.is(short.status, 400);
  t.is(short.body.error.param, 'new_password');
  t.regex(short.body.error.message, /at least 12 characters/);
  t.false(JSON.stringify(short.body).includes('Zq9-tiny'), 'the password is never echoed');
  const wrongCurrent = await post('/llm/auth/password', { current_password: 'not-it', new_password: next }, bearer(first.body.access_token));
  t.is(wrongCurrent.status, 400);
  t.is(wrongCurrent.body.error.param, 'current_password');
  const missing = await post('/llm/auth/password', { new_password: next }, bearer(first.body.access_token));
  t.is(missing.status, 400);
  t.is(missing.body.error.param, 'current_password');

  const changed = await post('/llm/auth/password', { current_password: password, new_password: next }, bearer(first.body.access_token));
  t.is(changed.status, 200, JSON.stringify(changed.body));
  t.truthy(changed.body.access_token);
  t.false(JSON.stringify(changed.body).includes(next));
  t.is((await post('/llm/auth/login', { email, password })).status, 401, 'the old password no longer signs in');
  t.is((await post('/llm/auth/login', { email, password: next })).status, 200);
  t.is((await post('/llm/auth/refresh', { refresh_token: other.body.refresh_token })).status, 401, "another session's refresh token is revoked");
  t.is((await post('/llm/auth/refresh', { refresh_token: changed.body.refresh_token })).status, 200, 'the new pair works');

  // Never with an API key; never without a credential.
  t.is((await post('/llm/auth/password', { current_password: next, new_password: newPassword() })).status, 401);
});

test.serial('an account upgraded without a password sets its first one with /auth/password; a short upgrade password is a 400 naming the field', async (t) => {
  const guest = await post('/llm/auth/guest-login');
  const email = newEmail();
  const short = await post('/llm/auth/upgrade', { email, password: 'tiny' }, bearer(guest.body.access_token));
  t.is(short.status, 400);
  t.is(short.body.error.param, 'password');
  t.true((await p.runtime.db.knex('users').where({ id: guest.body.user_id }).first()).is_guest, 'nothing changed');

  t.is((await post('/llm/auth/upgrade', { email }, bearer(guest.body.access_token))).status, 200);
  t.is((await post('/llm/auth/login', { email, password: 'anything-at-all' })).status, 401);
  const first = newPassword();
  const set = await post('/llm/auth/password', { new_password: first }, bearer(guest.body.access_token));
  t.is(set.status, 200, JSON.stringify(set.body));
  t.is((await post('/llm/auth/login', { email, password: first })).status, 200);
  // The hash is stored with its parameters and salt, never the password.
  const stored = await p.runtime.db.knex('identity_passwords').where({ user_id: guest.body.user_id }).first();
  t.regex(stored.hash, /^scrypt\$ln=15,r=8,p=1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
  t.false(stored.hash.includes(first));
});

test.serial('admin reset-login clears the lockout and returns a temporary password once; sessions end; members may not', async (t) => {
  const { email, password, userId } = await signUp();
  const session = await post('/llm/auth/login', { email, password });
  for (let i = 0; i < MAX_FAILURES; i++) await post('/llm/auth/login', { email, password: `wrong-${i}` });
  t.is((await post('/llm/auth/login', { email, password })).status, 429);

  const byMember = await post(`/v1/admin/users/${userId}/reset-login`, undefined, bearer(session.body.access_token));
  t.is(byMember.status, 403);

  const admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  const reset: any = await admin.post(`/admin/users/${userId}/reset-login`);
  t.is(reset.object, 'user.login_reset');
  t.is(reset.user_id, userId);
  t.regex(reset.temporary_password, /^[0-9A-Za-z]{24}$/);
  t.true(reset.sessions_revoked >= 1);

  t.is((await post('/llm/auth/login', { email, password })).status, 401, 'the old password is replaced');
  const temporary = await post('/llm/auth/login', { email, password: reset.temporary_password });
  t.is(temporary.status, 200, 'the lockout is cleared and the temporary password signs in');
  t.is((await post('/llm/auth/refresh', { refresh_token: session.body.refresh_token })).status, 401, 'earlier sessions ended');
  const next = newPassword();
  const changed = await post('/llm/auth/password', { current_password: reset.temporary_password, new_password: next }, bearer(temporary.body.access_token));
  t.is(changed.status, 200);

  // A guest has no sign-in to reset; an unknown id is a 404.
  const guest = await post('/llm/auth/guest-login');
  const noSignIn = await post(`/v1/admin/users/${guest.body.user_id}/reset-login`, undefined, { 'X-API-Key': ADMIN_KEY });
  t.is(noSignIn.status, 400);
  t.is(noSignIn.body.error.param, 'id');
  t.is((await post('/v1/admin/users/user_00000000000000000000000000/reset-login', undefined, { 'X-API-Key': ADMIN_KEY })).status, 404);
});

test.serial('bad login bodies are 400s naming the field, and a disabled account cannot sign in', async (t) => {
  const missing = await post('/llm/auth/login', { email: newEmail() });
  t.is(missing.status, 400);
  t.is(missing.body.error.param, 'password');
  const extra = await post('/llm/auth/login', { email: newEmail(), password: 'x', remember: true });
  t.is(extra.status, 400);

  const { email, password, userId } = await signUp();
  const disable = await fetch(`${p.url}/v1/admin/users/${userId}`, {
    method: 'PATCH',
    headers: { 'X-API-Key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ disabled: true }),
  });
  t.is(disable.status, 200);
  const login = await post('/llm/auth/login', { email, password });
  t.is(login.status, 401);
  t.is(login.body.error.message, 'Invalid e-mail or password');
});
