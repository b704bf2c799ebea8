import { applySchema, checkHttpUrl, HTTP_URL_MATCH, type KongFieldEntry } from '../core/index.js';

/** Asymmetric algorithms only: `none` and the HMAC family cannot be configured (no shared secrets with a public JWKS). */
export const ALLOWED_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;

export const Schema: KongFieldEntry[] = [
  { issuer: { type: 'string', required: true } },
  { audience: { type: 'string', required: true } },
  { jwks_url: { type: 'string', required: true, match: HTTP_URL_MATCH } },
  { algorithms: { type: 'set', len_min: 1, elements: { type: 'string', one_of: [...ALLOWED_ALGORITHMS] }, default: [...ALLOWED_ALGORITHMS] } },
  { max_lifetime_seconds: { type: 'integer', default: 3600, between: [1, 3600] } },
  { clock_skew_seconds: { type: 'integer', default: 30, between: [0, 300] } },
  /**
   * Least time between two JWKS fetches an unknown `kid` (or a failed fetch) causes. At least 1 s:
   * 0 would let every token with a made-up `kid` fetch the JWKS, one fetch per request.
   */
  { jwks_refresh_cooldown_seconds: { type: 'integer', default: 30, between: [1, 86400] } },
  /** Longest time a fetched JWKS is trusted before it is fetched again (jose's cacheMaxAge); a removed key stops working within it. */
  { jwks_max_age_seconds: { type: 'integer', default: 600, between: [1, 86400] } },
  { jwks_timeout_ms: { type: 'integer', default: 5000, between: [1, 60000] } },
  { user_id_claim: { type: 'string', default: 'sub' } },
  { guest_claim: { type: 'string', default: 'guest' } },
  { anonymous: { type: 'string' } },
  { run_on_preflight: { type: 'boolean', default: false } },
];

export interface JwtAuthConfig {
  issuer: string;
  audience: string;
  jwks_url: string;
  algorithms: string[];
  max_lifetime_seconds: number;
  clock_skew_seconds: number;
  jwks_refresh_cooldown_seconds: number;
  jwks_max_age_seconds: number;
  jwks_timeout_ms: number;
  user_id_claim: string;
  guest_claim: string;
  anonymous?: string;
  run_on_preflight: boolean;
}

export function parseJwtAuthConfig(input: unknown): JwtAuthConfig {
  const config = applySchema(Schema, input);
  // A JWKS no fetch can reach is a configuration error, not a 503 on every request.
  checkHttpUrl(config, 'jwks_url');
  return config as unknown as JwtAuthConfig;
}
