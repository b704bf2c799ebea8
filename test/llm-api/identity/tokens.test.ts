import { spawnSync } from 'node:child_process';
import { loadPlatformConfig } from '../../../services/platform/config.js';
import test from 'ava';
import { decodeJwt, decodeProtectedHeader, errors as joseErrors } from 'jose';
import { ConfigError, ManualClock } from '../../../services/kit/index.js';
import { startTestService, TEST_DATABASE_URL, type TestService } from '../../helpers/env.js';
import { entryArgs } from '../../helpers/process.js';
import { call, verifyAsEdge, identityOf } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

// The embedded issuer's keys: generated once and shared, rotation keeps the old key published
// until its tokens have expired, RS256 as an option, lifetimes bounded by configuration.
// Starts at real time: the rotation command runs in a child process on the system clock.
const clock = new ManualClock(Date.now());
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
});
test.after.always(() => svc?.close());

const kids = async () => (await call(svc, 'GET', '/.well-known/jwks.json')).body.keys.map((k: any) => k.kid);

test.serial('one signing key, even when many processes ensure it at once', async (t) => {
  const identity = identityOf(svc.runtime);
  await Promise.all([1, 2, 3, 4, 5].map(() => identity.keyRing.ensureKey()));
  const active = await svc.runtime.db.knex('identity_signing_keys').whereNull('retired_at');
  t.is(active.length, 1);
  t.deepEqual(await kids(), [active[0].kid]);
  // The private part never leaves the database.
  const jwks = (await call(svc, 'GET', '/.well-known/jwks.json')).body;
  t.false(JSON.stringify(jwks).includes('"d"'));
});

test.serial('rotation: new tokens use the new key; old tokens stay valid until expiry; the old key is then dropped', async (t) => {
  const before = await call(svc, 'POST', '/llm/auth/guest-login');
  const oldKid = decodeProtectedHeader(before.body.access_token).kid;

  // The rotation command, as an operator runs it, against this test's schema.
  const run = spawnSync(process.execPath, entryArgs('services/llm-api/identity/rotate-key.ts'), {
    env: { ...process.env, DATABASE_URL: TEST_DATABASE_URL, DATABASE_SCHEMA: svc.runtime.config.DATABASE_SCHEMA, AMQP_URL: '', LOG_LEVEL: 'silent' },
    encoding: 'utf8',
    timeout: 30_000,
  });
  t.is(run.status, 0, run.stderr);
  const printed = JSON.parse(run.stdout.trim().split('\n').pop()!);
  t.deepEqual(printed.retired, [oldKid]);
  t.not(printed.signing_kid, oldKid);
  t.deepEqual((await kids()).sort(), [oldKid, printed.signing_kid].sort());

  // This process notices the new key within its reload interval (60 s).
  clock.advance(61_000);
  const after = await call(svc, 'POST', '/llm/auth/guest-login');
  t.is(decodeProtectedHeader(after.body.access_token).kid, printed.signing_kid);
  // A token of the old key verifies while it lives (guest: 300 s; only 61 s passed).
  await t.notThrowsAsync(verifyAsEdge(svc, before.body.access_token, clock));

  // Once no token of the old key can be alive (max lifetime 3600 s + slack), it leaves the JWKS.
  clock.advance(3600_000 + 5 * 60_000);
  t.deepEqual(await kids(), [printed.signing_kid]);
  const identity = identityOf(svc.runtime);
  const second = await identity.keyRing.rotate();
  t.is(second.pruned, 1);
  t.is(await svc.runtime.db.knex('identity_signing_keys').where({ kid: oldKid }).first(), undefined);
});

test.serial('tokens are refused before nbf and by a different audience or issuer', async (t) => {
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  const early = new ManualClock(clock.now() - 60_000);
  const notYet = await t.throwsAsync(verifyAsEdge(svc, login.body.access_token, early));
  t.true(notYet instanceof joseErrors.JWTClaimValidationFailed);
  const identity = identityOf(svc.runtime);
  t.is((await identity.issuer!.verify(login.body.access_token)).sub, login.body.user_id);
  const other = identityOf(svc.runtime, { JWT_AUDIENCE: 'someone-else' });
  await t.throwsAsync(other.issuer!.verify(login.body.access_token));
});

test.serial('lifetimes: access tokens are bounded by 3600 s in configuration; RS256 is available', async (t) => {
  const error = t.throws(() => loadPlatformConfig({ ACCESS_TOKEN_TTL_SECONDS: '7200' }));
  t.true(error instanceof ConfigError);
  t.regex(error!.message, /ACCESS_TOKEN_TTL_SECONDS/);
  t.throws(() => loadPlatformConfig({ BOOTSTRAP_ADMIN_API_KEY: 'sk_short' }), { message: /BOOTSTRAP_ADMIN_API_KEY/ });
  t.throws(() => loadPlatformConfig({ JWT_SIGNING_ALG: 'HS256' }), { message: /JWT_SIGNING_ALG/ });

  const rs = await startTestService(llmApiService, { env: { JWT_SIGNING_ALG: 'RS256', ACCESS_TOKEN_TTL_SECONDS: '600', JWT_ISSUER: 'https://id.example.test' } });
  try {
    const login = await call(rs, 'POST', '/llm/auth/guest-login');
    t.is(decodeProtectedHeader(login.body.access_token).alg, 'RS256');
    t.is(decodeJwt(login.body.access_token).iss, 'https://id.example.test');
    const jwks = (await call(rs, 'GET', '/.well-known/jwks.json')).body;
    t.is(jwks.keys[0].kty, 'RSA');
    t.is((await call(rs, 'GET', '/.well-known/openid-configuration')).body.jwks_uri, 'https://id.example.test/.well-known/jwks.json');
  } finally {
    await rs.close();
  }
});
