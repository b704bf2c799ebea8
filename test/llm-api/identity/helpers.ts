import { createLocalJWKSet, jwtVerify, type JWTPayload } from 'jose';
import type { BaseConfig, Clock, Runtime } from '../../../services/kit/index.js';
import { createSecretBox, GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, loadMasterKey } from '../../../services/kit/index.js';
import { createIdentity, loadIdentityConfig } from '../../../services/llm-api/identity/index.js';
import { createPasswords } from '../../../services/llm-api/identity/passwords/domain.js';
import { createPasswordStore } from '../../../services/llm-api/identity/passwords/store.js';
import { spendLimitsPort } from '../../../services/llm-api/usage/index.js';
import type { TestService } from '../../helpers/env.js';

export interface Reply {
  status: number;
  body: any;
  headers: Headers;
}

/** One HTTP call to a service started with startTestService; JSON in, JSON out. */
export async function call(
  svc: Pick<TestService, 'url' | 'gatewaySecret'>,
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string>; rawBody?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { [GATEWAY_TOKEN_HEADER]: svc.gatewaySecret, ...options.headers };
  let body: string | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined) headers['content-type'] ??= 'application/json';
  const res = await fetch(svc.url + path, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

/**
 * What the edge does with a bearer token, at service level: verify it against the service's JWKS
 * (issuer, audience, exp, nbf at the given clock's time) and turn it into identity headers.
 */
export async function verifyAsEdge(
  svc: Pick<TestService, 'url' | 'gatewaySecret' | 'runtime'>,
  token: string,
  clock: Clock,
): Promise<JWTPayload> {
  const jwks = await call(svc, 'GET', '/.well-known/jwks.json');
  const { payload } = await jwtVerify(token, createLocalJWKSet(jwks.body), {
    issuer: svc.runtime.config.JWT_ISSUER,
    audience: svc.runtime.config.JWT_AUDIENCE,
    currentDate: new Date(clock.now()),
    maxTokenAge: 3600,
  });
  return payload;
}

export async function bearerHeaders(svc: Pick<TestService, 'url' | 'gatewaySecret' | 'runtime'>, token: string, clock: Clock) {
  const claims = await verifyAsEdge(svc, token, clock);
  return identityHeaders({ id: claims.sub!, email: claims.email as string | undefined, username: claims.preferred_username as string | undefined }, 'jwt');
}

export function identityHeaders(user: { id: string; email?: string | null; username?: string | null }, method: 'jwt' | 'apikey'): Record<string, string> {
  const headers: Record<string, string> = {
    [IDENTITY_HEADERS.authMethod]: method,
    [IDENTITY_HEADERS.userId]: user.id,
    [IDENTITY_HEADERS.subject]: user.id,
  };
  if (user.email) headers[IDENTITY_HEADERS.email] = user.email;
  if (user.username) headers[IDENTITY_HEADERS.username] = user.username;
  return headers;
}

/** Asserts SPEC.md shape A with the given status, type and param. */
export function assertError(t: import('ava').ExecutionContext, reply: Reply, status: number, param?: string | null) {
  t.is(reply.status, status, JSON.stringify(reply.body));
  t.truthy(reply.body?.error, JSON.stringify(reply.body));
  t.deepEqual(Object.keys(reply.body).sort(), ['error']);
  t.is(typeof reply.body.error.type, 'string');
  t.is(typeof reply.body.error.code, 'string');
  t.is(typeof reply.body.error.message, 'string');
  if (param !== undefined) t.is(reply.body.error.param, param);
}

/**
 * Identity over a test service's runtime, built as llm-api's composition root builds it: settings
 * from the runtime's environment (`overrides` changes platform settings first), the master key's
 * box, and an uncached budgets port.
 */
export function identityOf(runtime: Runtime, overrides: Partial<BaseConfig> = {}) {
  const platform = { ...runtime.config, ...overrides };
  return createIdentity({
    runtime,
    settings: { ...platform, ...loadIdentityConfig(platform.env) },
    box: createSecretBox(loadMasterKey(platform)),
    spend: spendLimitsPort({ clock: runtime.clock }),
  });
}

/**
 * The passwords domain over a service's database with `verify` in place of scrypt's check (a test
 * holds or counts the checks), its lockout settings `maxFailures` (5) and `lockoutSeconds` (900),
 * and a store of the test's own (one that holds a read) when given.
 */
export function passwordsWith(
  svc: Pick<TestService, 'runtime'>,
  clock: Clock,
  verify: (password: string, encoded: string) => Promise<boolean>,
  lockout: { maxFailures: number; lockoutSeconds: number } = { maxFailures: 5, lockoutSeconds: 900 },
  store = createPasswordStore(svc.runtime.db.knex),
) {
  const identity = identityOf(svc.runtime);
  return createPasswords({
    store,
    users: identity.users,
    provider: identity.provider,
    refreshTokens: identity.refreshTokens,
    clock,
    logger: svc.runtime.logger,
    issuer: identity.issuer,
    settings: { minLength: 12, ...lockout, externalSignInUrl: 'unused' },
    verify,
  });
}
