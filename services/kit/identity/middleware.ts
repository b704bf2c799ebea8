import type { RequestHandler } from 'express';
import { ApiError } from '../errors.js';
import { whenSettled, type MaybePromise } from '../maybe-async.js';
import { secretMatcher } from '../secrets.js';
import type { UserDirectory } from './directory.js';
import { decodeIdentityText, GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, type Principal } from './principal.js';
import '../http/context.js';

/**
 * Requires `X-Gateway-Token` = the shared secret on every request, so a service reached directly
 * cannot be fooled by forged identity headers. Health and metrics paths are exempt (probes).
 */
export function requireGatewayToken(secret: string, exempt: (path: string) => boolean): RequestHandler {
  const matches = secretMatcher(secret);
  return (req, _res, next) => {
    if (exempt(req.path)) return next();
    const token = req.headers[GATEWAY_TOKEN_HEADER];
    if (typeof token !== 'string' || !matches(token)) {
      return next(new ApiError(401, 'Requests must come through the gateway', { param: 'X-Gateway-Token' }));
    }
    next();
  };
}

const header = (value: string | string[] | undefined): string | null =>
  typeof value === 'string' && value.length > 0 && value.length <= 512 ? value : null;

/** An e-mail address or name, which the edge sends encoded when it is not printable ASCII. */
const textHeader = (value: string | string[] | undefined): string | null => {
  // Up to nine characters encode one (a three-byte character as three `%XX`).
  if (typeof value !== 'string' || value.length === 0 || value.length > 9 * 512) return null;
  return header(decodeIdentityText(value) ?? undefined);
};

/** True when the request carries any identity header the edge sets (`X-Auth-Method`, `X-User-*`). */
export function hasIdentityHeaders(req: { headers: Record<string, string | string[] | undefined> }): boolean {
  return Object.keys(req.headers).some((name) => name === IDENTITY_HEADERS.authMethod || name.startsWith('x-user-'));
}

/**
 * The principal the edge's identity headers name, or null when there are none. Headers that are
 * present but do not resolve to an enabled user are a 401, whatever the route.
 */
export function resolvePrincipal(
  directory: UserDirectory,
  req: { headers: Record<string, string | string[] | undefined> },
): MaybePromise<Principal | null> {
  const method = header(req.headers[IDENTITY_HEADERS.authMethod]);
  const userId = header(req.headers[IDENTITY_HEADERS.userId]);
  if (!method || !userId) return null;
  if (method !== 'jwt' && method !== 'apikey') throw new ApiError(401, 'Unknown authentication method');
  const principal = directory.resolve({
    authMethod: method,
    userId,
    subject: header(req.headers[IDENTITY_HEADERS.subject]) ?? userId,
    email: textHeader(req.headers[IDENTITY_HEADERS.email]),
    username: textHeader(req.headers[IDENTITY_HEADERS.username]),
    apiKeyId: method === 'apikey' ? (header(req.headers[IDENTITY_HEADERS.apiKeyId])?.slice(0, 64) ?? null) : null,
  });
  return whenSettled(principal, knownUser);
}

function knownUser(principal: Principal | null): Principal {
  if (!principal) throw new ApiError(401, 'Unknown or disabled user');
  return principal;
}
