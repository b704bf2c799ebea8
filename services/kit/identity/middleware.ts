import type { RequestHandler } from 'express';
import { ApiError } from '../errors.js';
import { safeEqual } from '../secrets.js';
import type { UserDirectory } from './directory.js';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS } from './principal.js';
import '../http/context.js';

/**
 * Requires `X-Gateway-Token` = the shared secret on every request, so a service reached directly
 * cannot be fooled by forged identity headers. Health and metrics paths are exempt (probes).
 */
export function requireGatewayToken(secret: string, exempt: (path: string) => boolean): RequestHandler {
  return (req, _res, next) => {
    if (exempt(req.path)) return next();
    const token = req.headers[GATEWAY_TOKEN_HEADER];
    if (typeof token !== 'string' || !safeEqual(token, secret)) {
      return next(new ApiError(401, 'Requests must come through the gateway', { param: 'X-Gateway-Token' }));
    }
    next();
  };
}

const header = (value: string | string[] | undefined): string | null =>
  typeof value === 'string' && value.length > 0 && value.length <= 512 ? value : null;

/**
 * Turns the edge's identity headers into `req.principal`. Without them the request is 401,
 * unless its path is public (then it continues anonymously).
 */
export function identity(directory: UserDirectory, isPublic: (path: string) => boolean): RequestHandler {
  return async (req, _res, next) => {
    const method = header(req.headers[IDENTITY_HEADERS.authMethod]);
    const userId = header(req.headers[IDENTITY_HEADERS.userId]);
    if (!method || !userId) {
      return isPublic(req.path) ? next() : next(new ApiError(401, 'Missing or invalid credentials'));
    }
    if (method !== 'jwt' && method !== 'apikey') return next(new ApiError(401, 'Unknown authentication method'));
    try {
      const principal = await directory.resolve({
        authMethod: method,
        userId,
        subject: header(req.headers[IDENTITY_HEADERS.subject]) ?? userId,
        email: header(req.headers[IDENTITY_HEADERS.email]),
        username: header(req.headers[IDENTITY_HEADERS.username]),
      });
      if (!principal) return next(new ApiError(401, 'Unknown or disabled user'));
      const keyId = method === 'apikey' ? header(req.headers[IDENTITY_HEADERS.apiKeyId]) : null;
      req.principal = keyId ? { ...principal, apiKeyId: keyId.slice(0, 64) } : principal;
      next();
    } catch (error) {
      next(error);
    }
  };
}

/** 403 unless the caller is an administrator. */
export const requireAdmin: RequestHandler = (req, _res, next) => {
  if (!req.principal) return next(new ApiError(401, 'Missing or invalid credentials'));
  if (!req.principal.isAdmin) return next(new ApiError(403, 'Administrator rights are required'));
  next();
};

/** The principal of an authenticated route (identity middleware guarantees it there). */
export function principalOf(req: { principal?: import('./principal.js').Principal }) {
  if (!req.principal) throw new ApiError(401, 'Missing or invalid credentials');
  return req.principal;
}
