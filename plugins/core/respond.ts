import { errorBody } from '../../services/kit/core/index.js';
import type { Respond } from './types.js';

/** An answer in SPEC.md shape A (`{"error":{type, code, message, param}}`), with optional headers. */
export function deny(
  status: number,
  message: string,
  options: { code?: string; param?: string | null; headers?: Record<string, string> } = {},
): Respond {
  return {
    kind: 'respond',
    status,
    body: errorBody(status, message, { code: options.code, param: options.param ?? null }),
    headers: options.headers,
  };
}

export const UNAUTHORIZED_MESSAGE = 'Missing or invalid credentials';
export const MISSING_CREDENTIALS_MESSAGE = 'Missing credentials: send "Authorization: Bearer <access token or API key>" or "X-API-Key: <API key>"';
/** A value that is neither an access token nor an API key (e.g. `Authorization: Bearer not-a-key`). */
export const INVALID_CREDENTIALS_MESSAGE = 'Invalid credentials: the bearer value is neither a valid access token nor a valid API key';
