import type { IdentityConfig } from './config.js';
import { runEvery, type BaseConfig, type Runtime, type SecretBox } from '../../kit/index.js';
import type { SpendLimitsPort } from '../usage/index.js';
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

/** What identity is built from; llm-api's composition root (deps.ts) parses the settings once and hands them here. */
export interface IdentityParts {
  runtime: Pick<Runtime, 'db' | 'clock' | 'logger' | 'revocations' | 'users'>;
  /** The platform's settings (issuer, audience, Keycloak) with identity's own. */
  settings: BaseConfig & IdentityConfig;
  /** Seals the signing keys' private halves (the platform's master key). */
  box: SecretBox;
  /** Writes keys' and users' budgets in their own transactions (the one whose cache admission reads). */
  spend: SpendLimitsPort;
}

/**
 * Identity: guest login, password sign-in (embedded issuer), refresh, upgrade, API keys and their validation, user and key
 * administration, and — with the embedded provider — the token issuer's JWKS and discovery.
 */
export function createIdentity({ runtime, settings: config, box, spend }: IdentityParts) {
  const knex = runtime.db.knex;
  const users = createIdentityUsersStore(knex);
  const keyRing = createKeyRing({ knex, clock: runtime.clock, alg: config.JWT_SIGNING_ALG, box });
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
    knex,
    clock: runtime.clock,
    logger: runtime.logger,
    revocations: runtime.revocations,
    userCache: runtime.users,
    store: keyStore,
    users,
    provider,
    spend,
    maxPerUser: config.API_KEYS_MAX_PER_USER,
    defaultTier: config.API_KEY_DEFAULT_TIER,
    maxTtlDays: config.API_KEY_MAX_TTL_DAYS,
  });
  const passwords = createPasswords({
    store: createPasswordStore(knex),
    users,
    provider,
    refreshTokens,
    clock: runtime.clock,
    logger: runtime.logger,
    issuer: keycloak ? null : issuer,
    settings: {
      minLength: config.PASSWORD_MIN_LENGTH,
      maxFailures: config.LOGIN_MAX_FAILURES,
      lockoutSeconds: config.LOGIN_LOCKOUT_SECONDS,
      externalSignInUrl: config.JWT_ISSUER,
    },
  });
  const auth = createAuth({
    knex,
    userCache: runtime.users,
    provider,
    users,
    passwords,
    guestEmailDomain: config.GUEST_EMAIL_DOMAIN,
    upgradeVerifiesEmail: config.UPGRADE_VERIFIES_EMAIL,
  });
  const userAdmin = createUserAdmin({ knex, userCache: runtime.users, spend, users, keyStore, apiKeys, refreshTokens, provider, logger: runtime.logger });
  return { provider, issuer: keycloak ? null : (issuer as TokenIssuer | null), keyRing, refreshTokens, apiKeys, auth, userAdmin, users, passwords };
}

export type Identity = ReturnType<typeof createIdentity>;


export const identityResource: LlmApiResource = {
  name: 'identity',
  migrations: identityMigrations,
  routes: identityRoutes,
  async start(deps, ctx) {
    const { identity, bootstrapAdminApiKey, sweepIntervalMs } = deps.identity;
    if (identity.issuer) await identity.keyRing.ensureKey();
    if (bootstrapAdminApiKey) {
      const { userId, created } = await identity.apiKeys.ensureBootstrapAdmin(bootstrapAdminApiKey);
      ctx.runtime.logger.info({ userId, created }, 'bootstrap admin API key ready');
    }
    // Expired API keys: deleted and their revocation published. Ended refresh families and
    // sign-in failure counters that lock nothing any more: deleted. One run at a time (the next
    // starts an interval after the last ended); stopping waits for a run in progress.
    const warn = (what: string) => (error: unknown) => ctx.runtime.logger.warn({ err: (error as Error).message }, `${what} failed`);
    const sweeps = runEvery(
      sweepIntervalMs,
      () =>
        Promise.all([
          identity.apiKeys.sweepExpired().catch(warn('API key sweep')),
          identity.refreshTokens.prune().catch(warn('refresh token prune')),
          identity.passwords.prune().catch(warn('sign-in failure prune')),
        ]),
      warn('identity sweep'),
    );
    ctx.onStop(() => sweeps.stop());
  },
};

export type { IdentityDeps } from './routes.js';

export { identityConfigShape, loadIdentityConfig, type IdentityConfig } from './config.js';
