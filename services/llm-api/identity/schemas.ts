import { z } from 'zod';
import { listOf } from '../../kit/index.js';
import { TIERS } from './api-keys/tiers.js';
import { MAX_PASSWORD_LENGTH } from './passwords/domain.js';
import { spendFields, spendViewFields } from '../usage/budgets.js';

/** Request schemas of the identity endpoints. Names and free text are capped at 256 characters. */
const MAX = 256;

/**
 * The embedded issuer's refresh tokens are 51 characters, but Keycloak's are signed JWTs of some
 * 700–1,000 characters (more with many scopes or an offline session): the bound only caps the work.
 */
const MAX_REFRESH_TOKEN_LENGTH = 8192;
export const refreshRequest = z.object({ refresh_token: z.string().min(1).max(MAX_REFRESH_TOKEN_LENGTH) });

export const upgradeRequest = z.strictObject({
  email: z.email().max(MAX),
  username: z
    .string()
    .min(3)
    .max(MAX)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._@-]*$/, 'letters, digits and . _ @ - only, starting with a letter or digit')
    .optional(),
  full_name: z.string().trim().min(1).max(MAX).optional(),
  /** Embedded issuer: sets a password for `POST /auth/login` (length checked against PASSWORD_MIN_LENGTH in the handler). */
  password: z.string().max(MAX_PASSWORD_LENGTH).optional(),
});

/** Sign-in. No length rule here: a password set under an older, shorter minimum still signs in. */
export const loginRequest = z.strictObject({
  email: z.string().trim().min(1).max(MAX),
  password: z.string().min(1).max(MAX_PASSWORD_LENGTH),
});

export const changePasswordRequest = z.strictObject({
  /** Required when the account has a password; an account upgraded without one sets its first here. */
  current_password: z.string().min(1).max(MAX_PASSWORD_LENGTH).optional(),
  new_password: z.string().max(MAX_PASSWORD_LENGTH),
});

const limitValue = z.number().int().min(1).max(1_000_000_000).nullable().optional();
export const limitsSchema = z.strictObject({ requests_per_minute: limitValue, requests_per_day: limitValue });

const keyName = z.string().trim().min(1).max(MAX);
const expiresInDays = (max: number) => z.number().int().min(1).max(max).optional();

export const createKeyRequest = (maxDays: number) =>
  z.strictObject({
    name: keyName.optional(),
    tier: z.enum(TIERS).optional(),
    limits: limitsSchema.nullable().optional(),
    expires_in_days: expiresInDays(maxDays),
    ...spendFields,
  });

export const adminCreateKeyRequest = (maxDays: number) =>
  z.strictObject({
    user_id: z.string().min(1).max(64),
    name: keyName,
    tier: z.enum(TIERS),
    limits: limitsSchema.nullable().optional(),
    expires_in_days: expiresInDays(maxDays),
    ...spendFields,
  });

const anySet = (v: Record<string, unknown>) => Object.values(v).some((x) => x !== undefined);
export const adminPatchKeyRequest = z
  .strictObject({ tier: z.enum(TIERS).optional(), limits: limitsSchema.nullable().optional(), ...spendFields })
  .refine(anySet, { message: 'give tier, limits, a budget field or allowed_models', path: ['tier'] });

export const adminPatchUserRequest = z
  .strictObject({ is_admin: z.boolean().optional(), disabled: z.boolean().optional(), email_verified: z.boolean().optional(), ...spendFields })
  .refine(anySet, {
    message: 'give is_admin, disabled, email_verified, a budget field or allowed_models',
    path: ['is_admin'],
  });

export const validateKeyRequest = z.object({ api_key: z.string().min(1).max(512) });

const boolQuery = z.enum(['true', 'false']).transform((v) => v === 'true').optional();
export const adminUsersQuery = z.object({
  email: z.string().max(MAX).optional(),
  is_guest: boolQuery,
  is_admin: boolQuery,
  disabled: boolQuery,
});

export const adminKeysQuery = z.object({ user_id: z.string().min(1).max(64).optional() });

// --- answers (the API document; `userView`, `apiKeyView` and `SpendView` build them) ---

/** A user as administration answers it (list, GET, PATCH): the account and its budget and allow-list. */
export const adminUserAnswer = z.strictObject({
  id: z.string(),
  object: z.literal('user'),
  email: z.string().nullable(),
  username: z.string().nullable(),
  full_name: z.string().nullable(),
  email_verified: z.boolean(),
  is_guest: z.boolean(),
  is_admin: z.boolean(),
  disabled: z.boolean(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  ...spendViewFields,
});
export const adminUserList = listOf(adminUserAnswer);

/** An API key as its owner and administrators see it (never the secret): its custom limits, budget and allow-list. */
export const apiKeyAnswer = z.strictObject({
  id: z.string(),
  object: z.literal('api_key'),
  name: z.string().nullable(),
  prefix: z.string(),
  last_four: z.string(),
  tier: z.enum(TIERS),
  limits: z.strictObject({ requests_per_minute: z.number().int().nullable().optional(), requests_per_day: z.number().int().nullable().optional() }).nullable(),
  created_at: z.number().int().nullable(),
  last_used_at: z.number().int().nullable(),
  expires_at: z.number().int().nullable(),
  ...spendViewFields,
});
/** A key just created: the answer above with the secret, shown this once. */
export const createdApiKeyAnswer = apiKeyAnswer.extend({ key: z.string() });
export const apiKeyList = listOf(apiKeyAnswer);
