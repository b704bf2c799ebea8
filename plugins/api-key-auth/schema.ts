import { DEFAULT_REDIS_PREFIX } from '../../services/kit/core/index.js';
import { applySchema, checkHttpUrl, HTTP_URL_MATCH, type KongFieldEntry } from '../core/index.js';

export const Schema: KongFieldEntry[] = [
  /** llm-api's internal `POST /auth/validate-api-key` (never the public edge). */
  { validate_url: { type: 'string', required: true, match: HTTP_URL_MATCH } },
  { gateway_token: { type: 'string', referenceable: true, encrypted: true } },
  { timeout_ms: { type: 'integer', default: 5000, between: [1, 60000] } },
  /** Positive answers are cached this long, keyed by the key's SHA-256; revocations purge at once. */
  { cache_ttl_seconds: { type: 'integer', default: 30, between: [0, 3600] } },
  { cache_max_entries: { type: 'integer', default: 10000, between: [1, 10000000] } },
  /** Changed, it must be listed in tiered-rate-limit's `key_header_names` too (which finds keys before authentication). */
  { header_name: { type: 'string', default: 'x-api-key' } },
  /** Also take an `sk_` key from `Authorization: Bearer sk_…` (what OpenAI-compatible SDKs send). */
  { accept_bearer: { type: 'boolean', default: true } },
  /** Redis pub/sub for revocations when the host has no channel of its own (Kong). */
  { redis_url: { type: 'string', referenceable: true } },
  /**
   * The deployment's Redis prefix (DECK_REDIS_PREFIX, as tiered-rate-limit's): it names the channel
   * llm-api publishes revocations on (`platform:revocations` for the default `edge`, else
   * `<prefix>:revocations`). `revocation_channel` names the channel outright instead.
   */
  { redis_prefix: { type: 'string', default: DEFAULT_REDIS_PREFIX } },
  { revocation_channel: { type: 'string' } },
  { anonymous: { type: 'string' } },
  { run_on_preflight: { type: 'boolean', default: false } },
];

export interface ApiKeyAuthConfig {
  validate_url: string;
  gateway_token?: string;
  timeout_ms: number;
  cache_ttl_seconds: number;
  cache_max_entries: number;
  header_name: string;
  accept_bearer: boolean;
  redis_url?: string;
  redis_prefix: string;
  revocation_channel?: string;
  anonymous?: string;
  run_on_preflight: boolean;
}

export function parseApiKeyAuthConfig(input: unknown): ApiKeyAuthConfig {
  const config = applySchema(Schema, input);
  checkHttpUrl(config, 'validate_url');
  return config as unknown as ApiKeyAuthConfig;
}
