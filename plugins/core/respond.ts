import { errorBody } from '../../services/kit/core/index.js';
import type { Respond } from './types.js';

/**
 * The challenges a 401 carries (RFC 9110: every 401 names how to authenticate). A request that sent
 * no credential is told the scheme only; one whose credential was refused also gets RFC 6750's
 * `invalid_token`, which is what a Bearer API key or access token that failed is.
 */
export const BEARER_CHALLENGE = { 'WWW-Authenticate': 'Bearer' };
export const INVALID_TOKEN_CHALLENGE = { 'WWW-Authenticate': 'Bearer error="invalid_token"' };

/**
 * An answer in SPEC.md shape A (`{"error":{type, code, message, param}}`), with optional headers;
 * a 401 without a challenge of its own gets the plain Bearer one.
 */
export function deny(
  status: number,
  message: string,
  options: { code?: string; param?: string | null; headers?: Record<string, string> } = {},
): Respond {
  return {
    kind: 'respond',
    status,
    body: errorBody(status, message, { code: options.code, param: options.param ?? null }),
    headers: status === 401 && options.headers?.['WWW-Authenticate'] === undefined ? { ...options.headers, ...BEARER_CHALLENGE } : options.headers,
  };
}

export const MISSING_CREDENTIALS_MESSAGE = 'Missing credentials: send "Authorization: Bearer <access token or API key>" or "X-API-Key: <API key>"';
/** A value that is neither an access token nor an API key (e.g. `Authorization: Bearer not-a-key`). */
export const INVALID_CREDENTIALS_MESSAGE = 'Invalid credentials: the bearer value is neither a valid access token nor a valid API key';
