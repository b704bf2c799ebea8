import test from 'ava';
import { exportJWK, generateKeyPair, calculateJwkThumbprint } from 'jose';
import { randomBytes } from 'node:crypto';
import { createSecretBox } from '../../../services/kit/index.js';
import { createKeyRing } from '../../../services/llm-api/identity/tokens/signing-keys.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { call, verifyAsEdge, identityOf } from './helpers.js';
import { llmApiService } from '../../../services/llm-api/service.js';

/**
 * The issuer's private signing keys are stored sealed under MASTER_KEY: the table never holds a
 * private JWK in plaintext, keys stored in plaintext before are sealed at start, and a database
 * copy without the master key cannot be used to sign.
 */
const MASTER_KEY = randomBytes(32).toString('hex');
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { env: { MASTER_KEY } });
});
test.after.always(() => svc?.close());

const rows = () => svc.runtime.db.knex('identity_signing_keys').select('*');

test.serial('a generated key is stored sealed: no private JWK member anywhere in the row', async (t) => {
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  t.is(login.status, 201);
  const all = await rows();
  t.true(all.length >= 1);
  for (const row of all) {
    t.is(row.private_jwk, null);
    t.regex(row.private_jwk_sealed, /^v1\./);
    t.false(JSON.stringify(row).includes('"d"'), 'no private exponent/scalar in clear');
  }
  await t.notThrowsAsync(verifyAsEdge(svc, login.body.access_token, svc.runtime.clock));
});

test.serial('a plaintext key left by an older version is sealed at start and keeps signing', async (t) => {
  const knex = svc.runtime.db.knex;
  // What the old code wrote: the private JWK in clear, as the active key.
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = `${(await calculateJwkThumbprint(publicJwk)).slice(0, 16)}-legacy01`;
  await knex('identity_signing_keys').whereNull('retired_at').update({ retired_at: Date.now() });
  await knex('identity_signing_keys').insert({
    kid,
    alg: 'ES256',
    public_jwk: JSON.stringify({ ...publicJwk, kid, alg: 'ES256', use: 'sig' }),
    private_jwk: JSON.stringify({ ...(await exportJWK(privateKey)), kid, alg: 'ES256' }),
    created_at: Date.now() + 1,
  });

  const identity = identityOf(svc.runtime);
  t.is(await identity.keyRing.ensureKey(), 1);
  const row = await knex('identity_signing_keys').where({ kid }).first();
  t.is(row.private_jwk, null);
  t.regex(row.private_jwk_sealed, /^v1\./);
  t.is(await identity.keyRing.ensureKey(), 0, 'sealing runs once');

  const signed = await identity.keyRing.signingKey();
  t.is(signed.kid, kid);
  // Another ring with the wrong master key cannot open it.
  const wrong = createKeyRing({ knex, clock: svc.runtime.clock, alg: 'ES256', box: createSecretBox(randomBytes(32)) });
  await t.throwsAsync(wrong.signingKey());
});
