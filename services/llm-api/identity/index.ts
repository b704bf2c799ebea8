import { loadIdentityConfig } from './config.js';
import { createSecretBox, loadMasterKey, type ServiceContext } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';
import { createUserAdmin } from './admin-users/domain.js';
import { createApiKeys } from './api-keys/domain.js';
import { createApiKeyStore } from './api-keys/store.js';
import { createAuth } from './auth.js';
import { identityMigrations } from './migrations.js';
import { createPasswords } from './passwords/domain.js';
import { createPasswordStore } from './passwords/store.js';
import { createEmbeddedProvider } from './providers/embedded.js';
import { createKeycloakProvider, keycloakSettingsFrom } from './providers/keycloak.js';
import type { IdentityProvider } from './providers/types.js';
import { identityRoutes } from './routes.js';
import { createIdentityUsersStore } from './store.js';
import { createTokenIssuer, type TokenIssuer } from './tokens/issuer.js';
import { createRefreshStore } from './tokens/refresh-store.js';
import { createRefreshTokens } from './tokens/refresh-tokens.js';
import { createKeyRing } from './tokens/signing-keys.js';

/**
 * Identity: guest login, password sign-in (embedded issuer), refresh, upgrade, API keys and their validation, user and key
 * administration, and — with the embedded provider — the token issuer's JWKS and discovery.
 */
export function createIdentity(ctx: ServiceContext) {
  const { runtime } = ctx;
  const config = { ...runtime.config, ...loadIdentityConfig(runtime.config.env) };
  const knex = runtime.db.knex;
  const users = createIdentityUsersStore(knex);
  const keyRing = createKeyRing({ knex, clock: runtime.clock, alg: config.JWT_SIGNING_ALG, box: createSecretBox(loadMasterKey(config)) });
  const issuer = createTokenIssuer({
    keys: keyRing,
    clock: runtime.clock,
    settings: {
      issuer: config.JWT_ISSUER,
      audience: config.JWT_AUDIENCE,
      accessTtlSeconds: config.ACCESS_TOKEN_TTL_SECONDS,
      guestAccessTtlSeconds: config.GUEST_ACCESS_TOKEN_TTL_SECONDS,
    },
  });
  const refreshTokens = createRefreshTokens({
    store: createRefreshStore(knex),
    clock: runtime.clock,
    settings: { ttlDays: config.REFRESH_TOKEN_TTL_DAYS, familyMaxDays: config.REFRESH_FAMILY_MAX_DAYS },
  });
  const keycloak = keycloakSettingsFrom(config);
  const provider: IdentityProvider = keycloak
    ? createKeycloakProvider({ settings: keycloak, clock: runtime.clock, users, logger: runtime.logger })
    : createEmbeddedProvider({ issuer, refreshTokens, users });
  const keyStore = createApiKeyStore(knex);
  const apiKeys = createApiKeys({
    runtime,
    store: keyStore,
    users,
    provider,
    maxPerUser: config.API_KEYS_MAX_PER_USER,
    defaultTier: config.API_KEY_DEFAULT_TIER,
  });
  const passwords = createPasswords({
    store: createPasswordStore(knex),
    users,
    provider,
    refreshTokens,
    clock: runtime.clock,
    logger: runtime.logger,
    settings: {
      minLength: config.PASSWORD_MIN_LENGTH,
      maxFailures: config.LOGIN_MAX_FAILURES,
      lockoutSeconds: config.LOGIN_LOCKOUT_SECONDS,
      externalSignInUrl: config.JWT_ISSUER,
    },
  });
  const auth = createAuth({
    runtime,
    provider,
    users,
    passwords,
    guestEmailDomain: config.GUEST_EMAIL_DOMAIN,
    upgradeVerifiesEmail: config.UPGRADE_VERIFIES_EMAIL,
  });
  const userAdmin = createUserAdmin({ runtime, users, keyStore, apiKeys, refreshTokens, provider });
  return { provider, issuer: keycloak ? null : (issuer as TokenIssuer | null), keyRing, refreshTokens, apiKeys, auth, userAdmin, users, passwords };
}

export type Identity = ReturnType<typeof createIdentity>;


export const identityResource: LlmApiResource = {
  name: 'identity',
  migrations: identityMigrations,
  routes: identityRoutes,
  async start(deps, ctx) {
    const { identity } = deps.identity;
    const config = loadIdentityConfig(ctx.runtime.config.env);
    if (identity.issuer) await identity.keyRing.ensureKey();
    if (config.BOOTSTRAP_ADMIN_API_KEY) {
      const { userId, created } = await identity.apiKeys.ensureBootstrapAdmin(config.BOOTSTRAP_ADMIN_API_KEY);
      ctx.runtime.logger.info({ userId, created }, 'bootstrap admin API key ready');
    }
    // Expired API keys: deleted and their revocation published. Ended refresh families and
    // sign-in failure counters that lock nothing any more: deleted.
    const sweep = setInterval(() => {
      const warn = (what: string) => (error: unknown) => ctx.runtime.logger.warn({ err: (error as Error).message }, `${what} failed`);
      identity.apiKeys.sweepExpired().catch(warn('API key sweep'));
      identity.refreshTokens.prune().catch(warn('refresh token prune'));
      identity.passwords.prune().catch(warn('sign-in failure prune'));
    }, config.API_KEY_SWEEP_INTERVAL_MS);
    sweep.unref();
    ctx.onStop(() => clearInterval(sweep));
  },
};

export type { IdentityDeps } from './routes.js';

export { identityConfigShape } from './config.js';
