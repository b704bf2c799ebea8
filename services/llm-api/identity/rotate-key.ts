/**
 * Signing-key rotation for the embedded issuer:
 *   node dist/services/llm-api/identity/rotate-key.js   (or: npx tsx services/llm-api/identity/rotate-key.ts)
 * A new key signs from now on; the old one stays in /.well-known/jwks.json until every token it
 * signed has expired (at most 3600 s), and keys retired longer ago are deleted. Edges that load the
 * JWKS once (SPEC.md section 5) must be restarted within that window.
 */
import { loadIdentityConfig } from './config.js';
import { createSecretBox, exitOnConfigError, loadBaseConfig, loadMasterKey, openRuntime, type BaseConfig } from '../../kit/index.js';
import { createKeyRing } from './tokens/signing-keys.js';

let config: BaseConfig;
try {
  config = loadBaseConfig();
} catch (error) {
  exitOnConfigError(error);
}
// No llm-api migrations here: the command works on a database llm-api has already migrated.
const runtime = await openRuntime(config, { name: 'identity-rotate-key', migrations: [] });
try {
  if (!(await runtime.db.knex.schema.hasTable('identity_signing_keys'))) {
    process.stderr.write('identity_signing_keys does not exist: start llm-api once before rotating keys\n');
    process.exitCode = 1;
  } else {
    const box = createSecretBox(loadMasterKey(config));
    const result = await createKeyRing({ knex: runtime.db.knex, clock: runtime.clock, alg: loadIdentityConfig(config.env).JWT_SIGNING_ALG, box }).rotate();
    process.stdout.write(`${JSON.stringify({ signing_kid: result.kid, retired: result.retired, pruned: result.pruned })}\n`);
  }
} finally {
  await runtime.close();
}
