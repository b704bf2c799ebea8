import { errorBody } from '../../services/kit/errors.js';
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
