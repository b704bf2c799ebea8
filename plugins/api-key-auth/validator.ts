import { Agent, request } from 'undici';
import { GATEWAY_TOKEN_HEADER } from '../../services/kit/core/index.js';
import type { TierLimits } from '../core/index.js';

export interface ValidatedKey {
  user_id: string;
  subject?: string;
  email?: string | null;
  username?: string | null;
  is_admin?: boolean;
  tier?: string | null;
  /** The key's effective limits (its tier's, with the key's own over them). */
  limits?: Record<string, unknown> | null;
  /** Only the limits set on the key itself (null: none); preferred over `limits` when present. */
  custom_limits?: Record<string, unknown> | null;
  key_id?: string | null;
  /** Unix seconds; null or absent: the key never expires. */
  expires_at?: number | null;
}

export type ValidationResult = { kind: 'valid'; key: ValidatedKey } | { kind: 'invalid' } | { kind: 'unavailable'; reason: string };

/**
 * Calls llm-api's `POST /auth/validate-api-key` with the gateway token over kept-alive connections.
 * 200 → valid; 401 → invalid (llm-api's answer for a key it does not know), unless the answer
 * names `X-Gateway-Token` (the validator refused this gateway, not the key). Anything else is
 * unavailable (the caller answers 503, logged, never passes the request through): a 400, 403 or 404
 * says the gateway asked wrongly (a `validate_url` with a wrong path answers 404 to every key), and
 * reading it as "invalid key" would tell every client its key is wrong. So is a 5xx, a timeout or a
 * refused connection.
 */
export function createKeyValidator(options: { url: string; gatewayToken?: string; timeoutMs: number }) {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 64, connect: { timeout: options.timeoutMs } });
  const url = new URL(options.url);

  async function validate(apiKey: string): Promise<ValidationResult> {
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
    if (options.gatewayToken) headers['x-gateway-token'] = options.gatewayToken;
    try {
      const res = await request(url, {
        method: 'POST',
        headers,
        body: JSON.stringify({ api_key: apiKey }),
        dispatcher: agent,
        headersTimeout: options.timeoutMs,
        bodyTimeout: options.timeoutMs,
        signal: AbortSignal.timeout(options.timeoutMs),
      });
      const text = await res.body.text();
      if (res.statusCode === 200) {
        // Never JSON.parse's own message as the reason: it quotes the answer, which may echo the key.
        const key = parseAnswer(text);
        if (!key || typeof key.user_id !== 'string' || key.user_id.length === 0) return { kind: 'unavailable', reason: 'malformed validator answer' };
        return { kind: 'valid', key };
      }
      if (res.statusCode === 401) {
        // llm-api refuses a wrong or missing X-Gateway-Token with 401 naming that header: a verdict
        // on this gateway's configuration, not on the key (every key would read as invalid).
        if (refusesGatewayToken(text)) return { kind: 'unavailable', reason: `validator refused the gateway token (${res.statusCode})` };
        return { kind: 'invalid' };
      }
      return { kind: 'unavailable', reason: `validator answered ${res.statusCode}` };
    } catch (error) {
      return { kind: 'unavailable', reason: (error as Error).name + ': ' + (error as Error).message };
    }
  }

  return { validate, close: () => agent.close() };
}

/** The validator's error body names the gateway token as what it refused (`error.param`). */
function refusesGatewayToken(text: string): boolean {
  try {
    const param = (JSON.parse(text) as { error?: { param?: unknown } } | null)?.error?.param;
    return typeof param === 'string' && param.toLowerCase() === GATEWAY_TOKEN_HEADER;
  } catch {
    return false;
  }
}

function parseAnswer(text: string): ValidatedKey | null {
  try {
    return JSON.parse(text) as ValidatedKey;
  } catch {
    return null;
  }
}

/**
 * The limits set on the key itself, from the validator's answer: `custom_limits` when it reports
 * them apart (llm-api does), else `limits` (a validator that reports only the key's own). A period
 * the answer does not name is left unset (the tier's applies); `null` is no limit.
 */
export function ownLimitsOf(key: ValidatedKey): TierLimits | null {
  return limitsFrom(Object.hasOwn(key, 'custom_limits') ? key.custom_limits : key.limits);
}

/** Limits from the validator, whichever naming it uses (`minute`/`day`, `per_minute`/`per_day`, `requests_per_*`). */
export function limitsFrom(raw: Record<string, unknown> | null | undefined): TierLimits | null {
  if (!raw || typeof raw !== 'object') return null;
  const pick = (...names: string[]) => {
    for (const name of names) {
      const value = raw[name];
      if (typeof value === 'number' && Number.isFinite(value)) return value;
      if (value === null) return null;
    }
    return undefined;
  };
  const minute = pick('minute', 'per_minute', 'requests_per_minute', 'rpm');
  const day = pick('day', 'per_day', 'requests_per_day', 'rpd');
  if (minute === undefined && day === undefined) return null;
  return { minute, day };
}
