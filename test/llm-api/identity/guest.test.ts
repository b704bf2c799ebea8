import test from 'ava';
import { loadIdentityConfig } from '../../../services/llm-api/identity/config.js';
import { decodeJwt, decodeProtectedHeader, errors as joseErrors } from 'jose';
import { ManualClock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders } from '../../helpers/users.js';
import { assertError, bearerHeaders, call, verifyAsEdge, identityOf } from './helpers.js';

// Guest login, tokens, refresh rotation and reuse detection, upgrade — at service level, with the
// edge's token check simulated against the service's own JWKS. Serial: the tests move one clock.
const clock = new ManualClock(Date.UTC(2026, 10, 22, 3, 0, 0));
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
});
test.after.always(() => svc?.close());

const guestLogin = (path = '/llm/auth/guest-login') => call(svc, 'POST', path);

test.serial('guest login creates a guest user and returns tokens (201)', async (t) => {
  const r = await guestLogin();
  t.is(r.status, 201, JSON.stringify(r.body));
  t.is(r.body.token_type, 'Bearer');
  t.is(r.body.expires_in, 300);
  t.regex(r.body.user_id, /^user_[0-9A-Za-z]{24}$/);
  t.regex(r.body.username, /^guest_[0-9a-z]{12}$/);
  t.regex(r.body.refresh_token, /^rt_[0-9A-Za-z]{48}$/);
  t.is(r.body.refresh_expires_in, 30 * 24 * 3600);

  const row = await svc.runtime.db.knex('users').where({ id: r.body.user_id }).first();
  t.true(row.is_guest);
  t.false(row.email_verified);
  t.regex(row.email, /^guest-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}@guest\.invalid$/);
  // The refresh token is stored only as a hash.
  const stored = await svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: r.body.user_id });
  t.is(stored.length, 1);
  t.false(JSON.stringify(stored).includes(r.body.refresh_token));

  const header = decodeProtectedHeader(r.body.access_token);
  t.is(header.alg, 'ES256');
  const claims = decodeJwt(r.body.access_token);
  t.is(claims.iss, svc.runtime.config.JWT_ISSUER);
  t.is(claims.aud, svc.runtime.config.JWT_AUDIENCE);
  t.is(claims.sub, r.body.user_id);
  t.is(claims.exp! - claims.iat!, 300);
  t.is(claims.nbf, claims.iat);
  t.is(claims.iat, Math.floor(clock.now() / 1000));
  t.truthy(claims.jti);
  t.is(claims.email, row.email);
  t.is(claims.preferred_username, r.body.username);
  t.is(claims.guest, true);
  const jwks = await call(svc, 'GET', '/.well-known/jwks.json');
  t.true(jwks.body.keys.some((k: any) => k.kid === header.kid && k.use === 'sig' && !('d' in k)));
});

test.serial('token answers are never cached (Cache-Control: no-store), refusals included; a profile answer is not marked', async (t) => {
  const login = await guestLogin();
  t.is(login.status, 201);
  t.is(login.headers.get('cache-control'), 'no-store');
  const refreshed = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(refreshed.status, 200);
  t.is(refreshed.headers.get('cache-control'), 'no-store');
  // A refusal of a credential route too (it may echo what was sent).
  const refused = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'rt_nope' } });
  t.true(refused.status >= 400);
  t.is(refused.headers.get('cache-control'), 'no-store');
  // A profile answer carries no credential: not marked.
  const me = await call(svc, 'GET', '/llm/auth/me', { headers: await bearerHeaders(svc, refreshed.body.access_token, clock) });
  t.is(me.status, 200, JSON.stringify(me.body));
  t.is(me.headers.get('cache-control'), null);
});

test.serial('both path forms work; discovery names the issuer and the JWKS', async (t) => {
  t.is((await guestLogin('/auth/guest-login')).status, 201);
  const discovery = await call(svc, 'GET', '/.well-known/openid-configuration');
  t.is(discovery.status, 200);
  t.is(discovery.body.issuer, svc.runtime.config.JWT_ISSUER);
  t.is(discovery.body.jwks_uri, `${svc.runtime.config.JWT_ISSUER}/.well-known/jwks.json`);
  t.is((await call(svc, 'GET', '/llm/.well-known/jwks.json')).status, 200);
  // Public paths still need the gateway token (services are reached only through the edge).
  const direct = await fetch(`${svc.url}/llm/auth/guest-login`, { method: 'POST' });
  t.is(direct.status, 401);
});

test.serial('a guest access token works until it expires, then the edge check refuses it', async (t) => {
  const login = await guestLogin();
  const headers = await bearerHeaders(svc, login.body.access_token, clock);
  const me = await call(svc, 'GET', '/auth/me', { headers });
  t.is(me.status, 200);
  t.is(me.body.id, login.body.user_id);
  t.true(me.body.is_guest);

  clock.advance(299_000);
  await t.notThrowsAsync(verifyAsEdge(svc, login.body.access_token, clock));
  clock.advance(2_000);
  const error = await t.throwsAsync(verifyAsEdge(svc, login.body.access_token, clock));
  t.true(error instanceof joseErrors.JWTExpired);
  // The issuer's own verifier (same JWKS, same clock) agrees.
});

test.serial('refresh rotates; reusing a used refresh token revokes the whole family', async (t) => {
  const login = await guestLogin();
  clock.advance(60_000);
  const first = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(first.status, 200, JSON.stringify(first.body));
  t.not(first.body.refresh_token, login.body.refresh_token);
  t.not(first.body.access_token, login.body.access_token);
  t.is(first.body.user_id, login.body.user_id);
  t.is(first.body.expires_in, 300);
  t.is(decodeJwt(first.body.access_token).sub, login.body.user_id);

  const second = await call(svc, 'POST', '/llm/auth/refresh-token', { body: { refresh_token: first.body.refresh_token } });
  t.is(second.status, 200);

  // Theft: the first (used) token comes back. Refused, and the family's live token dies with it.
  const reuse = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  assertError(t, reuse, 401, 'refresh_token');
  t.is(reuse.body.error.type, 'auth_error');
  const afterReuse = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: second.body.refresh_token } });
  assertError(t, afterReuse, 401, 'refresh_token');

  // Another login (another family) is unaffected.
  const other = await guestLogin();
  t.is((await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: other.body.refresh_token } })).status, 200);
});

test.serial('two concurrent uses of one refresh token: one wins, the other is reuse and kills the family', async (t) => {
  const login = await guestLogin();
  const body = { refresh_token: login.body.refresh_token };
  const replies = await Promise.all([call(svc, 'POST', '/llm/auth/refresh', { body }), call(svc, 'POST', '/llm/auth/refresh', { body })]);
  t.deepEqual(replies.map((r) => r.status).sort(), [200, 401]);
  const winner = replies.find((r) => r.status === 200)!;
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: winner.body.refresh_token } }), 401, 'refresh_token');
});

test.serial('refresh tokens expire after REFRESH_TOKEN_TTL_DAYS; a family ends after REFRESH_FAMILY_MAX_DAYS', async (t) => {
  const day = 24 * 3600 * 1000;
  const idle = await guestLogin();
  clock.advance(30 * day + 1000);
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: idle.body.refresh_token } }), 401, 'refresh_token');

  const active = await guestLogin();
  let token = active.body.refresh_token;
  for (let i = 0; i < 3; i++) {
    clock.advance(29 * day);
    const r = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: token } });
    t.is(r.status, 200, `rotation ${i}`);
    token = r.body.refresh_token;
    t.true(r.body.refresh_expires_in <= 90 * 24 * 3600 - (i + 1) * 29 * 24 * 3600);
  }
  clock.advance(4 * day); // 91 days after the login
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: token } }), 401, 'refresh_token');
  // Rows of ended families are pruned (until then they serve reuse detection).
  t.true((await identityOf(svc.runtime).refreshTokens.prune()) >= 4);
  t.is((await svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: active.body.user_id })).length, 0);
});

test.serial('upgrade: guest becomes permanent with a verified real e-mail; tokens then carry guest=false', async (t) => {
  const login = await guestLogin();
  const headers = await bearerHeaders(svc, login.body.access_token, clock);
  const up = await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'Ada@Example.com', username: 'ada', full_name: 'Ada Lovelace' } });
  t.is(up.status, 200, JSON.stringify(up.body));
  t.is(up.body.id, login.body.user_id);
  t.is(up.body.email, 'Ada@Example.com');
  t.false(up.body.email_verified, "nobody verified the address");
  t.false(up.body.is_guest);
  t.is(up.body.username, 'ada');
  t.is(up.body.full_name, 'Ada Lovelace');

  const me = await call(svc, 'GET', '/auth/me', { headers });
  t.false(me.body.is_guest);

  const refreshed = await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(refreshed.status, 200);
  t.is(refreshed.body.expires_in, loadIdentityConfig(svc.runtime.config.env).ACCESS_TOKEN_TTL_SECONDS);
  const claims = decodeJwt(refreshed.body.access_token);
  t.is(claims.guest, false);
  t.is(claims.email, 'Ada@Example.com');

  // Not a guest any more → 400.
  const again = await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'ada2@example.com' } });
  assertError(t, again, 400);

  // E-mail already taken (case-insensitive) → 409; username taken → 409.
  const other = await guestLogin();
  const otherHeaders = await bearerHeaders(svc, other.body.access_token, clock);
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers: otherHeaders, body: { email: 'ada@example.COM' } }), 409, 'email');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers: otherHeaders, body: { email: 'b@example.com', username: 'ADA' } }), 409, 'username');
  // Still a guest after the refused attempts.
  t.true((await call(svc, 'GET', '/auth/me', { headers: otherHeaders })).body.is_guest);
});

test.serial('a non-guest user (created elsewhere) cannot upgrade: 400', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex);
  const r = await call(svc, 'POST', '/auth/upgrade', { headers: edgeHeaders(svc.gatewaySecret, user), body: { email: 'x@example.com' } });
  assertError(t, r, 400);
});

test.serial('bad input is a 400 in shape A naming the parameter', async (t) => {
  const login = await guestLogin();
  const headers = await bearerHeaders(svc, login.body.access_token, clock);
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: {} }), 400, 'refresh_token');
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 42 } }), 400, 'refresh_token');
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { rawBody: '{"refresh_token":' }), 400, 'body');
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: 'rt_nonsense' } }), 401, 'refresh_token');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: {} }), 400, 'email');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'not-an-email' } }), 400, 'email');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: `${'a'.repeat(250)}@example.com` } }), 400, 'email');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'a@example.com', username: 'u'.repeat(257) } }), 400, 'username');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'a@example.com', full_name: 'f'.repeat(257) } }), 400, 'full_name');
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'a@example.com', role: 'admin' } }), 400);
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: 'guest-1@guest.invalid' } }), 400, 'email');
  // Without identity, upgrade is 401.
  assertError(t, await call(svc, 'POST', '/auth/upgrade', { body: { email: 'a@example.com' } }), 401);
  t.true((await call(svc, 'GET', '/auth/me', { headers })).body.is_guest);
});
