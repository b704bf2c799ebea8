import { z } from 'zod';
import { ApiError, isId, listEnvelope, pageOf, pageQuery, route, type Route } from '../../kit/index.js';
import type { NewKeyInput } from './api-keys/domain.js';
import type { SpendInput } from '../usage/index.js';
import type { Identity } from './index.js';
import {
  adminCreateKeyRequest,
  adminKeysQuery,
  adminPatchKeyRequest,
  adminPatchUserRequest,
  adminUserAnswer,
  adminUserList,
  adminUsersQuery,
  apiKeyAnswer,
  apiKeyList,
  changePasswordRequest,
  createdApiKeyAnswer,
  createKeyRequest,
  loginRequest,
  refreshRequest,
  upgradeRequest,
  validateKeyRequest,
} from './schemas.js';

/** What identity's routes need: the identity parts, and two settings read in handlers. */
export interface IdentityDeps {
  identity: Identity;
  /** GUEST_EMAIL_DOMAIN: addresses in it cannot become an account's e-mail. */
  guestEmailDomain: string;
  /** GUEST_LOGIN_ENABLED: off → guest login answers 403. */
  guestLoginEnabled?: boolean;
  /** BOOTSTRAP_ADMIN_API_KEY: ensured at start, when set. */
  bootstrapAdminApiKey?: string;
  /** API_KEY_SWEEP_INTERVAL_MS: how often expired keys, ended refresh families and stale sign-in counters are swept. */
  sweepIntervalMs: number;
}

/** Bodies of /auth/* are small; the key validator's is one key. */
const AUTH_BODY_LIMIT = 16 * 1024;
const VALIDATE_BODY_LIMIT = 4 * 1024;
/** The schemas accept the largest TTL any configuration allows; the configured bound is checked by the domain. */
const ANY_TTL_DAYS = 36500;

const keyParams = z.object({ id: z.string() });
const userParams = z.object({ id: z.string() });

const keyId = (value: string) => {
  if (!isId('apiKey', value)) throw new ApiError(404, 'API key not found', { param: 'id' });
  return value;
};
const userId = (value: string) => {
  if (!isId('user', value)) throw new ApiError(404, 'User not found', { param: 'id' });
  return value;
};

/** The budget fields of a request body, as the domain takes them. */
function spendOf(body: SpendInput): SpendInput {
  return { budget_period: body.budget_period, max_budget_micro_usd: body.max_budget_micro_usd, max_tokens: body.max_tokens, allowed_models: body.allowed_models };
}

/** The request's key fields as the domain takes them (user and admin creation alike). */
function createOptions(input: Omit<NewKeyInput, 'expiresInDays' | 'spend'> & SpendInput & { expires_in_days?: number }): NewKeyInput {
  return { name: input.name, tier: input.tier, limits: input.limits, expiresInDays: input.expires_in_days, spend: spendOf(input) };
}

/**
 * Identity's HTTP surface: guest login, refresh, upgrade and profile; the caller's API keys
 * (bearer token only); the edge's key validator (internal: service-to-service, never forwarded by
 * a deck route); administration of keys and users; the embedded issuer's JWKS and discovery.
 * Answers with a key or a user carry its budget and allow-list.
 */
export function identityRoutes(deps: { identity: IdentityDeps }): Route[] {
  const auth = { tag: 'identity', bodyLimit: AUTH_BODY_LIMIT } as const;
  const admin = { tag: 'identity', access: 'admin' } as const;
  return [
    route({
      ...auth,
      method: 'post',
      path: '/auth/guest-login',
      summary: 'Create a guest user and return its tokens',
      access: 'public',
      response: { status: 201, noStore: true },
      handler: () => {
        if (deps.identity.guestLoginEnabled === false) {
          throw new ApiError(403, 'Guest login is disabled on this platform; sign in with an account or use an API key', { code: 'guest_login_disabled' });
        }
        return deps.identity.identity.auth.guestLogin();
      },
    }),
    route({
      ...auth,
      method: 'post',
      path: '/auth/login',
      summary: 'Sign in with e-mail and password (embedded issuer); the same tokens as guest login',
      access: 'public',
      request: { body: loginRequest },
      response: { noStore: true },
      handler: ({ body }) => deps.identity.identity.passwords.login(body.email, body.password),
    }),
    route({
      ...auth,
      method: 'post',
      path: '/auth/password',
      summary: "Change the caller's password (all refresh tokens revoked; new tokens returned)",
      access: 'user',
      request: { body: changePasswordRequest },
      response: { noStore: true },
      handler: ({ principal, body, req }) => {
        if (principal.authMethod !== 'jwt') throw new ApiError(403, 'The password is changed with a bearer token, not with an API key', { param: 'Authorization' });
        // The edge passes the verified bearer token on: a first password is set only with a recent one.
        const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
        return deps.identity.identity.passwords.change(principal.userId, body.current_password, body.new_password, bearer);
      },
    }),
    ...['/auth/refresh', '/auth/refresh-token'].map((path) =>
      route({
        ...auth,
        method: 'post',
        path,
        summary: 'Exchange a refresh token for new tokens (the old refresh token is spent)',
        access: 'public',
        request: { body: refreshRequest },
        response: { noStore: true },
        handler: ({ body }) => deps.identity.identity.auth.refresh(body.refresh_token),
      }),
    ),
    route({
      ...auth,
      method: 'post',
      path: '/auth/logout',
      summary: "Sign out: end the refresh token's session (every token of that login); an unknown token answers the same",
      access: 'public',
      request: { body: refreshRequest },
      response: { noStore: true },
      handler: ({ body }) => deps.identity.identity.auth.logout(body.refresh_token),
    }),
    route({
      ...auth,
      method: 'post',
      path: '/auth/upgrade',
      summary: 'Turn the calling guest into an account with an e-mail (and, optionally, a password)',
      access: 'user',
      request: { body: upgradeRequest },
      response: { noStore: true },
      handler: ({ principal, body }) => {
        if (body.email.toLowerCase().endsWith(`@${deps.identity.guestEmailDomain.toLowerCase()}`)) {
          throw new ApiError(400, 'A temporary guest e-mail cannot be used for an account', { param: 'email' });
        }
        if (principal.authMethod !== 'jwt') throw new ApiError(403, 'Upgrade needs the guest bearer token', { param: 'Authorization' });
        return deps.identity.identity.auth.upgrade(principal.userId, { email: body.email, username: body.username, fullName: body.full_name, password: body.password });
      },
    }),
    route({
      ...auth,
      method: 'get',
      path: '/auth/me',
      summary: 'The calling user',
      access: 'user',
      handler: ({ principal }) => deps.identity.identity.auth.me(principal.userId),
    }),
    route({
      ...auth,
      method: 'get',
      path: '/.well-known/jwks.json',
      summary: "The embedded issuer's public signing keys (404 with Keycloak)",
      access: 'public',
      handler: async ({ res }) => {
        const issuer = deps.identity.identity.issuer;
        if (!issuer) throw new ApiError(404, 'This installation does not issue tokens');
        res.set('cache-control', 'public, max-age=300');
        return issuer.jwks();
      },
    }),
    route({
      ...auth,
      method: 'get',
      path: '/.well-known/openid-configuration',
      summary: "The embedded issuer's OpenID discovery document (404 with Keycloak)",
      access: 'public',
      handler: ({ res }) => {
        const issuer = deps.identity.identity.issuer;
        if (!issuer) throw new ApiError(404, 'This installation does not issue tokens');
        res.set('cache-control', 'public, max-age=300');
        return issuer.discovery();
      },
    }),

    // --- the caller's API keys ---
    route({
      ...auth,
      method: 'post',
      path: '/auth/api-keys',
      summary: 'Create an API key (the secret is shown once); every field is optional',
      access: 'user',
      request: { body: createKeyRequest(ANY_TTL_DAYS) },
      response: { status: 201, schema: createdApiKeyAnswer, noStore: true },
      handler: ({ principal, body }) => deps.identity.identity.apiKeys.create(principal, createOptions(body ?? {})),
    }),
    route({
      ...auth,
      method: 'get',
      path: '/auth/api-keys',
      summary: "List the caller's active API keys (never the secrets)",
      access: 'user',
      request: { query: pageQuery() },
      response: { schema: apiKeyList },
      handler: async ({ principal, query }) => {
        const page = pageOf(query);
        const { rows, total } = await deps.identity.identity.apiKeys.listOwn(principal, page);
        return listEnvelope(rows, total, page);
      },
    }),
    route({
      ...auth,
      method: 'delete',
      path: '/auth/api-keys/:id',
      summary: 'Delete (revoke) one of the caller’s API keys',
      access: 'user',
      request: { params: keyParams },
      handler: ({ principal, params }) => {
        const id = keyId(params.id);
        return deps.identity.identity.apiKeys.removeOwn(principal, id);
      },
    }),
    route({
      method: 'post',
      path: '/internal/auth/validate-api-key',
      summary: "The edge's key check: the key's owner, tier, limits and expiry (X-API-Key header or {api_key})",
      access: 'internal',
      tag: 'identity',
      bodyLimit: VALIDATE_BODY_LIMIT,
      handler: async ({ req, res, body }) => {
        const header = req.headers['x-api-key'];
        const input = validateKeyRequest.safeParse(body === undefined && typeof header === 'string' ? { api_key: header } : body);
        if (!input.success) throw new ApiError(400, "Missing or invalid parameter: 'api_key'.", { param: 'api_key' });
        res.set('cache-control', 'no-store');
        return deps.identity.identity.apiKeys.validate(input.data.api_key);
      },
    }),

    // --- administration ---
    route({
      ...admin,
      method: 'post',
      path: '/v1/admin/api-keys',
      summary: 'Create an API key for any user, any tier, custom limits',
      request: { body: adminCreateKeyRequest(ANY_TTL_DAYS) },
      response: { status: 201, schema: createdApiKeyAnswer, noStore: true },
      handler: ({ body }) => deps.identity.identity.apiKeys.createFor(body.user_id, createOptions(body)),
    }),
    route({
      ...admin,
      method: 'get',
      path: '/v1/admin/api-keys',
      summary: 'List active API keys of every user, or of one (`user_id`), with their budgets and allow-lists',
      request: { query: pageQuery().extend(adminKeysQuery.shape) },
      response: { schema: apiKeyList },
      handler: async ({ query }) => {
        const page = pageOf(query);
        const { rows, total } = await deps.identity.identity.apiKeys.listPage(query.user_id, page);
        return listEnvelope(rows, total, page);
      },
    }),
    route({
      ...admin,
      method: 'patch',
      path: '/v1/admin/api-keys/:id',
      summary: "Change a key's tier, rate limits, budget or allowed models",
      request: { params: keyParams, body: adminPatchKeyRequest },
      response: { schema: apiKeyAnswer },
      handler: ({ params, body }) => deps.identity.identity.apiKeys.update(keyId(params.id), { tier: body.tier, limits: body.limits, spend: spendOf(body) }),
    }),
    route({
      ...admin,
      method: 'delete',
      path: '/v1/admin/api-keys/:id',
      summary: "Delete (revoke) any user's API key",
      request: { params: keyParams },
      handler: ({ params }) => deps.identity.identity.apiKeys.remove(keyId(params.id)),
    }),
    route({
      ...admin,
      method: 'get',
      path: '/v1/admin/users',
      summary: 'List users with their budgets and allow-lists (filters: email, is_guest, is_admin, disabled)',
      request: { query: pageQuery().extend(adminUsersQuery.shape) },
      response: { schema: adminUserList },
      handler: async ({ query }) => {
        const page = pageOf(query);
        const { rows, total } = await deps.identity.identity.userAdmin.list(page, { email: query.email, isGuest: query.is_guest, isAdmin: query.is_admin, disabled: query.disabled });
        return listEnvelope(rows, total, page);
      },
    }),
    route({
      ...admin,
      method: 'get',
      path: '/v1/admin/users/:id',
      summary: 'Get a user with its budget and allow-list',
      request: { params: userParams },
      response: { schema: adminUserAnswer },
      handler: ({ params }) => deps.identity.identity.userAdmin.get(userId(params.id)),
    }),
    route({
      ...admin,
      method: 'patch',
      path: '/v1/admin/users/:id',
      summary: 'Set is_admin, disabled, email_verified, a budget or allowed models',
      request: { params: userParams, body: adminPatchUserRequest },
      response: { schema: adminUserAnswer },
      handler: ({ principal, params, body }) => {
        const { is_admin, disabled, email_verified } = body;
        return deps.identity.identity.userAdmin.patch(principal.userId, userId(params.id), { is_admin, disabled, email_verified, spend: spendOf(body) });
      },
    }),
    route({
      ...admin,
      method: 'post',
      path: '/v1/admin/users/:id/reset-login',
      summary: 'Clear the sign-in lockout and set a temporary password (returned once); every refresh token revoked',
      request: { params: userParams },
      response: { noStore: true },
      handler: ({ params }) => deps.identity.identity.passwords.resetLogin(userId(params.id)),
    }),
  ];
}
