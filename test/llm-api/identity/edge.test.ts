import test from 'ava';
import { decodeJwt } from 'jose';
import { loadEdgeConfig } from '../../../services/gateway/config.js';
import { ManualClock } from '../../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../../helpers/platform.js';

// Identity through the edge (the embedded gateway reading deck/kong.yaml, verifying JWTs against
// llm-api's JWKS and API keys through llm-api's validator), as a client sees it.
// The whole platform shares one ManualClock, so token expiry is reached without waiting.
const clock = new ManualClock(Date.now());
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({ clock });
});
test.after.always(() => p?.stop());

interface Reply {
  status: number;
  body: any;
}

async function edge(method: string, path: string, options: { token?: string; apiKey?: string; body?: unknown } = {}): Promise<Reply> {
  const headers: Record<string, string> = {};
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.apiKey) headers['x-api-key'] = options.apiKey;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(p.url + path, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** A permanent (upgraded) account and a fresh bearer token for it. */
async function permanentAccount(email: string) {
  const login = await edge('POST', '/llm/auth/guest-login');
  const up = await edge('POST', '/auth/upgrade', { token: login.body.access_token, body: { email } });
  if (up.status !== 200) throw new Error(`upgrade failed: ${JSON.stringify(up.body)}`);
  const refreshed = await edge('POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  return { userId: login.body.user_id as string, token: refreshed.body.access_token as string };
}

test.serial('sign-out through the edge (public, no access token needed) ends the session: neither its current nor an earlier refresh token renews', async (t) => {
  const login = await edge('POST', '/llm/auth/guest-login');
  const refreshed = await edge('POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(refreshed.status, 200);
  // Another sign-in of the same kind is a session of its own, and stays.
  const other = await edge('POST', '/llm/auth/guest-login');

  const out = await edge('POST', '/llm/auth/logout', { body: { refresh_token: refreshed.body.refresh_token } });
  t.is(out.status, 200, JSON.stringify(out.body));
  t.deepEqual(out.body, { revoked: true });
  t.is((await edge('POST', '/llm/auth/refresh', { body: { refresh_token: refreshed.body.refresh_token } })).status, 401);
  t.is((await edge('POST', '/auth/refresh', { body: { refresh_token: other.body.refresh_token } })).status, 200, 'another session is untouched');

  // An unknown token answers the same (nothing tells which tokens exist); a missing one is a 400 naming it.
  const unknown = await edge('POST', '/auth/logout', { body: { refresh_token: `rt_${'x'.repeat(48)}` } });
  t.is(unknown.status, 200);
  t.deepEqual(unknown.body, { revoked: true });
  const missing = await edge('POST', '/auth/logout', { body: {} });
  t.is(missing.status, 400);
  t.is(missing.body.error.param, 'refresh_token');
});

test.serial('guest lifecycle: login → authenticated call → refresh → reuse refused → upgrade → guest flag gone', async (t) => {
  const login = await edge('POST', '/llm/auth/guest-login');
  t.is(login.status, 201, JSON.stringify(login.body));
  t.is(login.body.expires_in, 300);

  // Without a credential the edge answers 401 before llm-api.
  t.is((await edge('GET', '/auth/me')).status, 401);
  const me = await edge('GET', '/auth/me', { token: login.body.access_token });
  t.is(me.status, 200, JSON.stringify(me.body));
  t.is(me.body.id, login.body.user_id); // X-User-ID is the platform id, the token's sub
  t.true(me.body.is_guest);

  clock.advance(30_000);
  const refreshed = await edge('POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(refreshed.status, 200, JSON.stringify(refreshed.body));
  t.not(refreshed.body.refresh_token, login.body.refresh_token);
  t.is((await edge('GET', '/auth/me', { token: refreshed.body.access_token })).status, 200);

  const reuse = await edge('POST', '/llm/auth/refresh-token', { body: { refresh_token: login.body.refresh_token } });
  t.is(reuse.status, 401);
  t.is(reuse.body.error.type, 'auth_error');
  // Theft detection revoked the family: the rotated token is dead as well.
  t.is((await edge('POST', '/llm/auth/refresh', { body: { refresh_token: refreshed.body.refresh_token } })).status, 401);

  const up = await edge('POST', '/auth/upgrade', { token: refreshed.body.access_token, body: { email: 'lin@example.com', username: 'lin' } });
  t.is(up.status, 200, JSON.stringify(up.body));
  t.false(up.body.is_guest);
  t.false(up.body.email_verified, "nobody verified the address");
  const after = await edge('GET', '/llm/auth/me', { token: refreshed.body.access_token });
  t.is(after.status, 200);
  t.false(after.body.is_guest);
  t.is(after.body.email, 'lin@example.com');
});

test.serial('a guest token is refused by the edge once it has expired (clock moved, no sleep)', async (t) => {
  const login = await edge('POST', '/llm/auth/guest-login');
  t.is((await edge('GET', '/auth/me', { token: login.body.access_token })).status, 200);
  const exp = decodeJwt(login.body.access_token).exp! * 1000;
  // Past expiry plus the edge's allowed clock skew.
  clock.set(exp + (loadEdgeConfig(p.runtime.config.env).EDGE_JWT_CLOCK_SKEW_SECONDS + 1) * 1000);
  const refused = await edge('GET', '/auth/me', { token: login.body.access_token });
  t.is(refused.status, 401);
  t.is(refused.body.error.type, 'auth_error');
  // The refresh token still gets a new, working access token.
  const renewed = await edge('POST', '/llm/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.is(renewed.status, 200);
  t.is((await edge('GET', '/auth/me', { token: renewed.body.access_token })).status, 200);
});

test.serial('API key: create → works with X-API-Key → listed without secret → delete → 401 on the next request', async (t) => {
  const account = await permanentAccount('keys@example.com');
  const created = await edge('POST', '/auth/api-keys', { token: account.token, body: { name: 'ci' } });
  t.is(created.status, 201, JSON.stringify(created.body));
  const key: string = created.body.key;
  t.regex(key, /^sk_[0-9A-Za-z]{32}$/);

  const viaKey = await edge('GET', '/auth/me', { apiKey: key });
  t.is(viaKey.status, 200, JSON.stringify(viaKey.body));
  t.is(viaKey.body.id, account.userId); // one user, one id through either credential

  // An API key cannot mint keys (bearer JWT only).
  t.is((await edge('POST', '/auth/api-keys', { apiKey: key, body: { name: 'x' } })).status, 403);

  const list = await edge('GET', '/auth/api-keys', { token: account.token });
  t.is(list.status, 200);
  t.deepEqual(list.body.data.map((k: any) => k.id), [created.body.id]);
  t.false(JSON.stringify(list.body).includes(key));
  t.false('key' in list.body.data[0]);
  t.false('key_hash' in list.body.data[0]);

  // Cached at the edge now; deletion must still take effect on the very next request.
  t.is((await edge('GET', '/auth/me', { apiKey: key })).status, 200);
  const del = await edge('DELETE', `/auth/api-keys/${created.body.id}`, { token: account.token });
  t.is(del.status, 200);
  const next = await edge('GET', '/auth/me', { apiKey: key });
  t.is(next.status, 401);
  t.is(next.body.error.type, 'auth_error');
});

test.serial('the validator is not a public route; disabling a user stops its key and its tokens at the edge', async (t) => {
  t.is((await edge('POST', '/internal/auth/validate-api-key', { body: { api_key: 'sk_' + 'a'.repeat(32) } })).status, 404);

  const account = await permanentAccount('soon-disabled@example.com');
  const key = (await edge('POST', '/auth/api-keys', { token: account.token, body: { name: 'k' } })).body.key;
  t.is((await edge('GET', '/auth/me', { apiKey: key })).status, 200);
  await p.runtime.db.knex('users').where({ id: account.userId }).update({ is_admin: true });
  p.runtime.users.invalidate(account.userId);
  const other = await permanentAccount('victim@example.com');
  const otherKey = (await edge('POST', '/auth/api-keys', { token: other.token, body: { name: 'k' } })).body.key;
  t.is((await edge('GET', '/auth/me', { apiKey: otherKey })).status, 200);

  const disabled = await edge('PATCH', `/v1/admin/users/${other.userId}`, { token: account.token, body: { disabled: true } });
  t.is(disabled.status, 200, JSON.stringify(disabled.body));
  t.is((await edge('GET', '/auth/me', { apiKey: otherKey })).status, 401);
  t.is((await edge('GET', '/auth/me', { token: other.token })).status, 401);
});
