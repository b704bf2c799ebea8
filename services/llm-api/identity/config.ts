import { z } from 'zod';
import { bool, loadConfig, optionalUrl } from '../../kit/index.js';
import { TIERS } from './api-keys/tiers.js';

/**
 * Identity's own settings (README.md "Identity" table): token lifetimes, API-key limits, the first
 * admin's key, the Keycloak driver. Issuer and audience are platform-wide (the edge verifies tokens
 * against them). Part of llm-api's shape; parsed from the environment the platform was configured from.
 */
export const identityConfigShape = {
  JWT_SIGNING_ALG: z.enum(['ES256', 'RS256']).default('ES256'),
  /** Lifetime of non-guest access tokens; the edge refuses tokens living longer than 3600 s. */
  ACCESS_TOKEN_TTL_SECONDS: z.coerce.number().int().min(30).max(3600).default(900),
  GUEST_ACCESS_TOKEN_TTL_SECONDS: z.coerce.number().int().min(30).max(3600).default(300),
  REFRESH_TOKEN_TTL_DAYS: z.coerce.number().int().min(1).max(365).default(30),
  /** A refresh-token family (one login) ends this long after the login, however often it is rotated. */
  REFRESH_FAMILY_MAX_DAYS: z.coerce.number().int().min(1).max(3650).default(90),
  GUEST_EMAIL_DOMAIN: z.string().regex(/^[a-z0-9.-]+\.[a-z0-9-]+$/i, 'a domain name').default('guest.invalid'),
  API_KEYS_MAX_PER_USER: z.coerce.number().int().min(1).max(1000).default(10),
  /** Upper bound for `expires_in_days` of a new API key. */
  API_KEY_MAX_TTL_DAYS: z.coerce.number().int().min(1).max(36500).default(3650),
  /** How often expired API keys are swept (deleted, revocation published). */
  API_KEY_SWEEP_INTERVAL_MS: z.coerce.number().int().min(1000).default(60_000),
  /** Tier of keys created without one (a user's own keys always; an administrator may choose). */
  API_KEY_DEFAULT_TIER: z.enum(TIERS).default('free'),
  /** Password sign-in (embedded issuer): shortest new password accepted. */
  PASSWORD_MIN_LENGTH: z.coerce.number().int().min(8).max(256).default(12),
  /** Failed sign-ins in a row (each within the lockout window of the previous) that lock an address. */
  LOGIN_MAX_FAILURES: z.coerce.number().int().min(1).max(1000).default(5),
  /** How long a locked address stays locked, and how long a failed attempt is remembered. */
  LOGIN_LOCKOUT_SECONDS: z.coerce.number().int().min(1).max(31 * 86400).default(900),
  /** On: upgrading a guest marks the new e-mail verified (nobody proved it; off keeps it unverified). */
  UPGRADE_VERIFIES_EMAIL: bool(false),
  BOOTSTRAP_ADMIN_API_KEY: z.string().regex(/^sk_[0-9A-Za-z]{32}$/, 'sk_ followed by 32 base62 characters').optional(),
  /** Keycloak driver: all four set → guest users, tokens and upgrades go to Keycloak. */
  KEYCLOAK_URL: optionalUrl,
  KEYCLOAK_REALM: z.string().min(1).optional(),
  KEYCLOAK_CLIENT_ID: z.string().min(1).optional(),
  KEYCLOAK_CLIENT_SECRET: z.string().min(1).optional(),
  KEYCLOAK_TIMEOUT_MS: z.coerce.number().int().min(100).default(5000),
};

export type IdentityConfig = z.infer<z.ZodObject<typeof identityConfigShape>>;

export const loadIdentityConfig = (env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): IdentityConfig =>
  loadConfig(identityConfigShape, env as NodeJS.ProcessEnv);
