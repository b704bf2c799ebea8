import test from 'ava';
import { SignJWT } from 'jose';
import { ManualClock } from '../../services/kit/clock.js';
import { createJwtAuth } from '../../plugins/jwt-auth/core.js';
import { parseJwtAuthConfig } from '../../plugins/jwt-auth/schema.js';
import type { Decision, EdgeRequest } from '../../plugins/core/types.js';
import { AUDIENCE, ISSUER, newSigningKey, startFakeIssuer, unsignedToken } from './fakes.js';

let issuer: Awaited<ReturnType<typeof startFakeIssuer>>;
test.before(async () => {
  issuer = await startFakeIssuer();
});
test.after.always(async () => {
  await issuer?.close();
});

const NOW = 1_800_000_000_000;
const nowS = NOW / 1000;

function plugin(overrides: Record<string, unknown> = {}, clock = new ManualClock(NOW)) {
  const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, ...overrides });
  return { core: createJwtAuth(config, { clock }), clock };
}

const request = (headers: Record<string, string>, method = 'GET'): EdgeRequest => ({ method, path: '/v1/models', headers, clientIp: '127.0.0.1', shared: {} });
const bearer = (token: string) => request({ authorization: `Bearer ${token}` });

function refused(t: import('ava').ExecutionContext, decision: Decision, status = 401, message?: RegExp) {
  t.is(decision.kind, 'respond');
  if (decision.kind !== 'respond') return;
  t.is(decision.status, status);
  const body = decision.body as { error: { type: string; code: string; message: string } };
  t.is(body.error.type, status === 401 ? 'auth_error' : 'internal_error');
  t.is(body.error.code, status === 401 ? 'unauthorized' : 'service_unavailable');
  if (message) t.regex(body.error.message, message);
}

test('a valid ES256 token yields the verified identity (sub is the platform user id)', async (t) => {
  const { core } = plugin();
  const token = await issuer.sign({ guest: false }, { iat: nowS - 10, sub: 'user_abc' });
  const decision = await core.access(bearer(token));
  t.is(decision.kind, 'continue');
  if (decision.kind !== 'continue') return;
  t.deepEqual(decision.identity, { authMethod: 'jwt', userId: 'user_abc', subject: 'user_abc', email: 'ada@example.test', username: 'ada', isGuest: false, emailVerified: null, bucket: 'user:user_abc' });
});

test('RS256 tokens are accepted too, and the guest claim is carried', async (t) => {
  const { core } = plugin();
  const token = await issuer.sign({ guest: true }, { key: issuer.keys[1], iat: nowS });
  const decision = await core.access(bearer(token));
  t.true(decision.kind === 'continue' && decision.identity?.isGuest === true);
});

test('no Authorization header: anonymous consumer when configured, else 401', async (t) => {
  const anonymous = await plugin({ anonymous: 'anonymous' }).core.access(request({}));
  t.deepEqual(anonymous, { kind: 'continue', anonymous: 'anonymous' });
  refused(t, await plugin().core.access(request({})));
});

test('a malformed Authorization header is 401 with a Bearer challenge', async (t) => {
  const decision = await plugin().core.access(request({ authorization: 'Basic Zm9vOmJhcg==' }));
  refused(t, decision);
  t.is(decision.kind === 'respond' ? decision.headers?.['WWW-Authenticate'] : '', 'Bearer error="invalid_token"');
  refused(t, await plugin().core.access(request({ authorization: 'Bearer not-a-jwt' })));
});

test('expired, not-yet-valid, over-long, future-issued and expiry-less tokens are 401', async (t) => {
  const { core } = plugin();
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS - 400, exp: nowS - 100 }))), 401, /expired/);
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS, nbf: nowS + 600, exp: nowS + 900 }))), 401, /not yet valid/);
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS - 10, exp: nowS - 10 + 3601 }))), 401, /lifetime exceeds 3600/);
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS + 600, nbf: nowS - 1, exp: nowS + 900 }))), 401, /future/);
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS, exp: null }))), 401, /no expiry/);
});

test('exactly 3600 s of lifetime is accepted; the clock decides, not wall time', async (t) => {
  const { core, clock } = plugin();
  const token = await issuer.sign({}, { iat: nowS, exp: nowS + 3600 });
  t.is((await core.access(bearer(token))).kind, 'continue');
  clock.advance(3600_000 + 31_000); // past exp plus the 30 s skew
  refused(t, await core.access(bearer(token)), 401, /expired/);
});

test('wrong issuer and wrong audience are 401', async (t) => {
  const { core } = plugin();
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS, iss: 'https://evil.test' }))), 401, /issuer/);
  refused(t, await core.access(bearer(await issuer.sign({}, { iat: nowS, aud: 'other' }))), 401, /audience/);
});

test('alg:none and HMAC tokens are refused, and cannot be configured', async (t) => {
  const { core } = plugin();
  refused(t, await core.access(bearer(unsignedToken({ iss: ISSUER, aud: AUDIENCE, sub: 'user_x', iat: nowS, exp: nowS + 60 }))), 401, /algorithm/);
  // HS256 "signed" with the public key material, the classic key-confusion attack.
  const secret = new TextEncoder().encode(JSON.stringify(issuer.keys[1]!.jwk));
  const hs = await new SignJWT({ sub: 'user_x' }).setProtectedHeader({ alg: 'HS256', kid: issuer.keys[1]!.kid }).setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt(nowS).setExpirationTime(nowS + 60).sign(secret);
  refused(t, await core.access(bearer(hs)), 401, /algorithm/);
  t.throws(() => parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, algorithms: ['none'] }), { message: /one of/ });
  t.throws(() => parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, algorithms: ['HS256'] }), { message: /one of/ });
});

test('a tampered signature is 401', async (t) => {
  const { core } = plugin();
  const token = await issuer.sign({}, { iat: nowS });
  const [h, p] = token.split('.');
  const forged = `${h}.${Buffer.from(JSON.stringify({ sub: 'user_admin', iss: ISSUER, aud: AUDIENCE, iat: nowS, exp: nowS + 60 })).toString('base64url')}.${token.split('.')[2]}`;
  t.not(p, forged.split('.')[1]);
  refused(t, await core.access(bearer(forged)), 401, /signature/);
});

test('an unknown kid refetches the JWKS once per cool-down; rotation needs no restart', async (t) => {
  const { core, clock } = plugin({ jwks_refresh_cooldown_seconds: 30 });
  await core.access(bearer(await issuer.sign({}, { iat: nowS })));
  const fetchesAfterFirst = core.jwks.fetches;
  t.is(fetchesAfterFirst, 1);

  clock.advance(30_000); // the initial load counts as a fetch: wait out its cool-down
  const rotated = await newSigningKey('ES256');
  const tokenNewKey = await issuer.sign({}, { key: rotated, iat: nowS });
  // Not yet published: one refetch, then 401; a second unknown kid within the cool-down does not refetch.
  refused(t, await core.access(bearer(tokenNewKey)), 401, /unknown key/);
  t.is(core.jwks.fetches, 2);
  refused(t, await core.access(bearer(tokenNewKey)), 401);
  refused(t, await core.access(bearer(await issuer.sign({}, { key: await newSigningKey('ES256'), iat: nowS }))), 401);
  t.is(core.jwks.fetches, 2);

  issuer.publish([...issuer.keys, rotated]);
  clock.advance(30_000);
  t.is((await core.access(bearer(tokenNewKey))).kind, 'continue');
  t.is(core.jwks.fetches, 3);
  issuer.publish(issuer.keys);
});

test('concurrent requests with an unknown kid share one JWKS fetch', async (t) => {
  const { core } = plugin();
  const token = await issuer.sign({}, { iat: nowS });
  const decisions = await Promise.all(Array.from({ length: 10 }, () => core.access(bearer(token))));
  t.true(decisions.every((d) => d.kind === 'continue'));
  t.is(core.jwks.fetches, 1);
});

test('JWKS unreachable before any key was loaded → 503, never a pass-through', async (t) => {
  const down = await startFakeIssuer();
  down.setDown(true);
  try {
    const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: down.url });
    const core = createJwtAuth(config, { clock: new ManualClock(NOW) });
    refused(t, await core.access(bearer(await down.sign({}, { iat: nowS }))), 503);
  } finally {
    await down.close();
  }
});

test('only a real CORS preflight skips the check; any other OPTIONS request is checked like GET', async (t) => {
  const preflight = request({ authorization: 'Bearer x.y.z', origin: 'https://app.example', 'access-control-request-method': 'POST' }, 'OPTIONS');
  t.is((await plugin().core.access(preflight)).kind, 'continue');
  refused(t, await plugin({ run_on_preflight: true }).core.access(preflight));
  // OPTIONS without Origin, or without Access-Control-Request-Method, is an ordinary request.
  refused(t, await plugin().core.access(request({ authorization: 'Bearer x.y.z' }, 'OPTIONS')));
  refused(t, await plugin().core.access(request({ authorization: 'Bearer x.y.z', origin: 'https://app.example' }, 'OPTIONS')));
  refused(t, await plugin().core.access(request({}, 'OPTIONS')));
});

test('OR logic: with anonymous configured, a refused token falls back to the anonymous consumer and records why', async (t) => {
  const { core } = plugin({ anonymous: 'anonymous' });
  const expired = await core.access(bearer(await issuer.sign({}, { iat: nowS - 400, exp: nowS - 100 })));
  t.deepEqual(expired, { kind: 'continue', anonymous: 'anonymous', failure: { method: 'jwt', status: 401, message: 'Token expired' } });
  const garbage = await core.access(request({ authorization: 'Bearer not-a-key' }));
  t.like(garbage, { kind: 'continue', anonymous: 'anonymous', failure: { method: 'jwt', status: 401 } });
});

test('Bearer not-a-key: a clear "invalid credentials" message, not one about the header format', async (t) => {
  refused(t, await plugin().core.access(request({ authorization: 'Bearer not-a-key' })), 401, /^Invalid credentials: .*neither a valid access token nor a valid API key/);
});

test('the JWKS is trusted for at most jwks_max_age_seconds: a key the issuer removed stops working; rotation still refetches at once', async (t) => {
  const clock = new ManualClock(NOW);
  let keys = [issuer.keys[0]!, issuer.keys[1]!];
  let fetches = 0;
  const fetchJwks: typeof fetch = async () => {
    fetches++;
    return new Response(JSON.stringify({ keys: keys.map((k) => k.jwk) }), { status: 200, headers: { 'content-type': 'application/json' } });
  };
  const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: 'http://jwks.invalid/', jwks_max_age_seconds: 600, jwks_refresh_cooldown_seconds: 30 });
  const core = createJwtAuth(config, { clock, fetch: fetchJwks });
  const signWith = (key: (typeof issuer.keys)[number]) => issuer.sign({}, { key, iat: Math.floor(clock.now() / 1000), exp: Math.floor(clock.now() / 1000) + 900 });

  t.is((await core.access(bearer(await signWith(issuer.keys[1]!)))).kind, 'continue');
  t.is(fetches, 1);
  // The issuer removes key 1. Within the maximum age the cached copy still answers (no fetch per request) …
  keys = [issuer.keys[0]!];
  clock.advance(599_000);
  t.is((await core.access(bearer(await signWith(issuer.keys[1]!)))).kind, 'continue');
  t.is(fetches, 1);
  // … past it the JWKS is fetched again and the removed key is refused.
  clock.advance(2_000);
  refused(t, await core.access(bearer(await signWith(issuer.keys[1]!))), 401, /unknown key/);
  t.is(fetches, 2);
  // Rotation: a new kid triggers a refetch at once (cool-down permitting), not only at max age.
  const rotated = await newSigningKey('ES256', 'rotated-kid');
  keys = [issuer.keys[0]!, rotated];
  clock.advance(31_000);
  t.is((await core.access(bearer(await signWith(rotated)))).kind, 'continue');
  t.is(fetches, 3);
});

test('past the maximum age a JWKS that cannot be fetched is not trusted any more (503, never the stale keys)', async (t) => {
  const clock = new ManualClock(NOW);
  let up = true;
  const fetchJwks: typeof fetch = async () => {
    if (!up) throw new Error('connection refused');
    return new Response(JSON.stringify({ keys: [issuer.keys[0]!.jwk] }), { status: 200 });
  };
  const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: 'http://jwks.invalid/', jwks_max_age_seconds: 600 });
  const core = createJwtAuth(config, { clock, fetch: fetchJwks });
  const token = () => issuer.sign({}, { key: issuer.keys[0], iat: Math.floor(clock.now() / 1000), exp: Math.floor(clock.now() / 1000) + 900 });
  t.is((await core.access(bearer(await token()))).kind, 'continue');
  up = false;
  clock.advance(601_000);
  refused(t, await core.access(bearer(await token())), 503);
  up = true;
  // The failed fetch is retried once its cool-down (30 s by default) has passed.
  clock.advance(30_000);
  t.is((await core.access(bearer(await token()))).kind, 'continue');
});

test('a JWKS that cannot be fetched is retried at most once per cool-down, not once per request (first load and past the maximum age)', async (t) => {
  const clock = new ManualClock(NOW);
  let up = false;
  let fetches = 0;
  const fetchJwks: typeof fetch = async () => {
    fetches++;
    if (!up) throw new Error('connection refused');
    return new Response(JSON.stringify({ keys: [issuer.keys[0]!.jwk] }), { status: 200 });
  };
  const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: 'http://jwks.invalid/', jwks_max_age_seconds: 600, jwks_refresh_cooldown_seconds: 30 });
  const core = createJwtAuth(config, { clock, fetch: fetchJwks });
  const token = () => issuer.sign({}, { key: issuer.keys[0], iat: Math.floor(clock.now() / 1000), exp: Math.floor(clock.now() / 1000) + 900 });
  // Never loaded: one fetch, then every request within the cool-down is 503 without another.
  for (let i = 0; i < 5; i++) refused(t, await core.access(bearer(await token())), 503);
  t.is(fetches, 1);
  clock.advance(30_000);
  up = true;
  t.is((await core.access(bearer(await token()))).kind, 'continue');
  t.is(fetches, 2);
  // Past the maximum age with the issuer down: likewise one fetch per cool-down.
  up = false;
  clock.advance(600_000);
  for (let i = 0; i < 5; i++) refused(t, await core.access(bearer(await token())), 503);
  t.is(fetches, 3);
  clock.advance(10_000);
  refused(t, await core.access(bearer(await token())), 503);
  t.is(fetches, 3);
  clock.advance(20_000);
  up = true;
  t.is((await core.access(bearer(await token()))).kind, 'continue');
  t.is(fetches, 4);
  // A refetch for an unknown kid fails shortly before the maximum age: past it the keys are not
  // trusted any more, though that failure's cool-down has not passed.
  clock.advance(590_000);
  up = false;
  const unknownKid = await issuer.sign({}, { key: await newSigningKey('ES256'), iat: Math.floor(clock.now() / 1000) });
  refused(t, await core.access(bearer(unknownKid)), 401, /unknown key/);
  t.is(fetches, 5);
  clock.advance(15_000);
  refused(t, await core.access(bearer(await token())), 503);
  t.is(fetches, 5);
});

test('past the maximum age, requests that arrive while the refetch is in flight wait for it and share it', async (t) => {
  const clock = new ManualClock(NOW);
  let fetches = 0;
  let release!: () => void;
  let refetchStarted!: () => void;
  const refetching = new Promise<void>((resolve) => (refetchStarted = resolve));
  const fetchJwks: typeof fetch = async () => {
    fetches++;
    if (fetches > 1) {
      const released = new Promise<void>((resolve) => (release = resolve));
      refetchStarted();
      await released;
    }
    return new Response(JSON.stringify({ keys: [issuer.keys[0]!.jwk] }), { status: 200 });
  };
  const config = parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: 'http://jwks.invalid/', jwks_max_age_seconds: 600 });
  const core = createJwtAuth(config, { clock, fetch: fetchJwks });
  const token = () => issuer.sign({}, { key: issuer.keys[0], iat: Math.floor(clock.now() / 1000), exp: Math.floor(clock.now() / 1000) + 900 });
  t.is((await core.access(bearer(await token()))).kind, 'continue');
  clock.advance(601_000);
  const first = core.access(bearer(await token()));
  const second = core.access(bearer(await token()));
  await refetching;
  release();
  t.is((await first).kind, 'continue');
  t.is((await second).kind, 'continue');
  t.is(fetches, 2);
});

test('the schema refuses unknown fields and a lifetime above 3600 s', (t) => {
  t.throws(() => parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, max_lifetime_seconds: 7200 }), { message: /between/ });
  t.throws(() => parseJwtAuthConfig({ issuer: ISSUER, audience: AUDIENCE, jwks_url: issuer.url, surprise: 1 }), { message: /unknown field/ });
  t.throws(() => parseJwtAuthConfig({ audience: AUDIENCE, jwks_url: issuer.url }), { message: /issuer: required/ });
});

test('Authorization: Bearer sk_… is an API key: left to api-key-auth', async (t) => {
  t.deepEqual(await plugin({ anonymous: 'anonymous' }).core.access(request({ authorization: `Bearer sk_${'a'.repeat(32)}` })), { kind: 'continue', anonymous: 'anonymous' });
});
