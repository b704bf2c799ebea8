import type { BaseConfig } from '../kit/settings/index.js';
import type { ServiceContext } from '../kit/index.js';
import type { EdgeConfig } from './config.js';

/** llm-api's key validator: service-to-service only, under /internal/ (no deck route forwards it). */
export const API_KEY_VALIDATOR_PATH = '/internal/auth/validate-api-key';

/**
 * The `DECK_*` variables deck/kong.yaml uses, with the embedded gateway's defaults taken from the
 * platform configuration (so `npm start` needs no environment). A `DECK_*` variable set in the
 * process environment wins, as it would for `deck gateway sync`.
 */
export function deckVariables(
  config: Pick<BaseConfig, 'JWT_ISSUER' | 'JWT_AUDIENCE' | 'REDIS_URL' | 'EDGE_REDIS_PREFIX'> & EdgeConfig,
  urls: ServiceContext['urls'],
  gatewaySecret: string,
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const defaults: Record<string, string> = {
    DECK_LLM_API_URL: urls.llmApi,
    DECK_RESPONSE_API_URL: urls.responseApi,
    DECK_MEDIA_API_URL: urls.mediaApi,
    DECK_MCP_TOOLS_URL: urls.mcpTools,
    DECK_GATEWAY_SHARED_SECRET: gatewaySecret,
    DECK_JWT_ISSUER: config.JWT_ISSUER,
    DECK_JWT_AUDIENCE: config.JWT_AUDIENCE,
    DECK_JWKS_URL: config.EDGE_JWKS_URL ?? `${urls.llmApi}/.well-known/jwks.json`,
    DECK_JWT_MAX_LIFETIME_SECONDS: String(config.EDGE_JWT_MAX_LIFETIME_SECONDS),
    DECK_JWT_CLOCK_SKEW_SECONDS: String(config.EDGE_JWT_CLOCK_SKEW_SECONDS),
    DECK_JWKS_REFRESH_COOLDOWN_SECONDS: String(config.EDGE_JWKS_REFRESH_COOLDOWN_SECONDS),
    DECK_JWKS_MAX_AGE_SECONDS: String(config.EDGE_JWKS_MAX_AGE_SECONDS),
    DECK_API_KEY_VALIDATE_URL: `${urls.llmApi}${API_KEY_VALIDATOR_PATH}`,
    DECK_API_KEY_TIMEOUT_MS: String(config.EDGE_API_KEY_TIMEOUT_MS),
    DECK_API_KEY_CACHE_TTL_SECONDS: String(config.EDGE_API_KEY_CACHE_TTL_SECONDS),
    DECK_RATE_LIMIT_IP_PER_MINUTE: String(config.EDGE_RATE_LIMIT_IP_PER_MINUTE),
    DECK_RATE_LIMIT_FREE_PER_MINUTE: String(config.EDGE_RATE_LIMIT_FREE_PER_MINUTE),
    DECK_RATE_LIMIT_FREE_PER_DAY: String(config.EDGE_RATE_LIMIT_FREE_PER_DAY),
    DECK_RATE_LIMIT_PRO_PER_MINUTE: String(config.EDGE_RATE_LIMIT_PRO_PER_MINUTE),
    DECK_RATE_LIMIT_PRO_PER_DAY: String(config.EDGE_RATE_LIMIT_PRO_PER_DAY),
    DECK_RATE_LIMIT_USER_TIER: config.EDGE_RATE_LIMIT_USER_TIER,
    DECK_RATE_LIMIT_GUEST_TIER: config.EDGE_RATE_LIMIT_GUEST_TIER,
    DECK_RATE_LIMIT_UNVERIFIED_TIER: config.EDGE_RATE_LIMIT_UNVERIFIED_TIER ?? config.EDGE_RATE_LIMIT_GUEST_TIER,
    DECK_RATE_LIMIT_IPV6_PREFIX: String(config.EDGE_RATE_LIMIT_IPV6_PREFIX),
    DECK_GUEST_LOGIN_PER_HOUR: String(config.EDGE_GUEST_LOGIN_PER_HOUR),
    DECK_RATE_LIMIT_FAULT_POLICY: config.EDGE_RATE_LIMIT_FAULT_POLICY,
    DECK_RATE_LIMIT_REDIS_TIMEOUT_MS: String(config.EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS),
    DECK_RATE_LIMIT_POLICY: config.REDIS_URL ? 'redis' : 'local',
    DECK_REDIS_URL: config.REDIS_URL ?? 'redis://127.0.0.1:6379',
    DECK_REDIS_PREFIX: config.EDGE_REDIS_PREFIX,
    DECK_CORS_ORIGINS: JSON.stringify(config.EDGE_CORS_ORIGINS.split(',').map((o) => o.trim()).filter(Boolean)),
  };
  return { ...defaults, ...deckOverrides(env) };
}

/** The `DECK_*` variables the environment sets (an empty one counts as unset): they win over the defaults. */
export function deckOverrides(env: NodeJS.ProcessEnv): Record<string, string> {
  const fromEnv: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (name.startsWith('DECK_') && value !== undefined && value !== '') fromEnv[name] = value;
  return fromEnv;
}
