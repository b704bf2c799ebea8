import { z } from 'zod';

/**
 * Configuration is read once at start from the environment and validated with zod. A missing or
 * malformed setting stops the process with one line naming the variable (see `exitOnConfigError`).
 * Every variable is documented in README.md.
 */

export const port = (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback);
export const optionalUrl = z.string().url().optional();
export const csv = z
  .string()
  .default('')
  .transform((value) => value.split(',').map((part) => part.trim()).filter(Boolean));
export const bool = (fallback: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'])
    .default(fallback ? 'true' : 'false')
    .transform((value) => value === 'true' || value === '1' || value === 'yes');

/** Settings every service and worker shares. Services extend this shape with their own keys. */
export const baseConfigShape = {
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./.data'),
  DATABASE_URL: optionalUrl,
  DATABASE_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]*$/, 'a lower-case SQL identifier')
    .optional(),
  DATABASE_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  AMQP_URL: optionalUrl,
  BUS_EXCHANGE: z.string().min(1).default('platform.events'),
  BUS_QUEUE_PREFIX: z.string().default(''),
  BUS_PREFETCH: z.coerce.number().int().min(1).max(1000).default(32),
  BUS_POLL_MS: z.coerce.number().int().min(10).default(250),
  OUTBOX_POLL_MS: z.coerce.number().int().min(10).default(500),
  REDIS_URL: optionalUrl,
  GATEWAY_SHARED_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  GATEWAY_PORT: port(8000),
  LLM_API_PORT: port(8080),
  RESPONSE_API_PORT: port(8082),
  MEDIA_API_PORT: port(8285),
  MCP_TOOLS_PORT: port(8091),
  LLM_API_URL: optionalUrl,
  RESPONSE_API_URL: optionalUrl,
  MEDIA_API_URL: optionalUrl,
  MCP_TOOLS_URL: optionalUrl,
  INTERNAL_HTTP_TIMEOUT_MS: z.coerce.number().int().min(1).default(30000),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(10000),
  IDENTITY_CACHE_TTL_MS: z.coerce.number().int().min(0).default(5000),
  JSON_BODY_LIMIT: z.string().regex(/^\d+(b|kb|mb)$/i, 'a size such as 1mb').default('1mb'),
  EGRESS_ALLOW_HOSTS: csv,
  TRUSTED_PROXIES: csv,
  METRICS_ENABLED: bool(true),

  // --- edge (services/gateway, plugins) ---

  // --- identity (llm-api /auth, /llm/auth) ---
  // Issuer and audience of the embedded token issuer; the edge verifies tokens against the same values.
  JWT_ISSUER: z.string().min(1).default('http://localhost:8000'),
  JWT_AUDIENCE: z.string().min(1).default('ai-gateway'),
  JWT_SIGNING_ALG: z.enum(['ES256', 'RS256']).default('ES256'),
  /** Lifetime of non-guest access tokens; the edge refuses tokens living longer than 3600 s. */
  ACCESS_TOKEN_TTL_SECONDS: z.coerce.number().int().min(30).max(3600).default(900),
  GUEST_ACCESS_TOKEN_TTL_SECONDS: z.coerce.number().int().min(30).max(3600).default(300),
  REFRESH_TOKEN_TTL_DAYS: z.coerce.number().int().min(1).max(365).default(30),
  /** A refresh-token family (one login) ends this long after the login, however often it is rotated. */
  REFRESH_FAMILY_MAX_DAYS: z.coerce.number().int().min(1).max(3650).default(90),
  GUEST_EMAIL_DOMAIN: z.string().regex(/^[a-z0-9.-]+\.[a-z0-9-]+$/i, 'a domain name').default('guest.invalid'),
  API_KEYS_MAX_PER_USER: z.coerce.number().int().min(1).max(1000).default(10),
  /** Upper bound for `expires_in_days` of a new API key. */
  API_KEY_MAX_TTL_DAYS: z.coerce.number().int().min(1).max(36500).default(3650),
  /** How often expired API keys are swept (deleted, revocation published). */
  API_KEY_SWEEP_INTERVAL_MS: z.coerce.number().int().min(1000).default(60_000),
  BOOTSTRAP_ADMIN_API_KEY: z.string().regex(/^sk_[0-9A-Za-z]{32}$/, 'sk_ followed by 32 base62 characters').optional(),
  /** Keycloak driver: all four set → guest users, tokens and upgrades go to Keycloak. */
  KEYCLOAK_URL: optionalUrl,
  KEYCLOAK_REALM: z.string().min(1).optional(),
  KEYCLOAK_CLIENT_ID: z.string().min(1).optional(),
  KEYCLOAK_CLIENT_SECRET: z.string().min(1).optional(),
  KEYCLOAK_TIMEOUT_MS: z.coerce.number().int().min(100).default(5000),

  // --- llm (providers, models, chat completions) ---
  /** AES-256-GCM key for provider API keys (32 bytes as base64 or 64 hex chars); unset: generated once under DATA_DIR. */
  MASTER_KEY: z.string().min(32, 'at least 32 characters').optional(),
  LLM_UPSTREAM_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(1).default(5000),
  LLM_UPSTREAM_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(1).default(120000),
  LLM_UPSTREAM_BODY_TIMEOUT_MS: z.coerce.number().int().min(1).default(300000),
  LLM_UPSTREAM_CONNECTIONS: z.coerce.number().int().min(1).max(100000).default(2048),
  LLM_MODELS_TIMEOUT_MS: z.coerce.number().int().min(1).default(15000),
  LLM_HEALTH_FAILURE_THRESHOLD: z.coerce.number().int().min(1).default(3),
  LLM_HEALTH_COOLDOWN_MS: z.coerce.number().int().min(0).default(30000),
  LLM_HEALTH_PROBE_INTERVAL_MS: z.coerce.number().int().min(0).default(10000),
  LLM_ROUTING_SEED: z.coerce.number().int().optional(),
  LLM_SSE_KEEPALIVE_MS: z.coerce.number().int().min(0).default(15000),
  LLM_CHAT_BODY_LIMIT: z.string().regex(/^\d+(b|kb|mb)$/i, 'a size such as 10mb').default('10mb'),
  LLM_CATALOG_POLL_MS: z.coerce.number().int().min(0).default(2000),
  LLM_USAGE_FLUSH_MS: z.coerce.number().int().min(1).default(1000),
  LLM_USAGE_BATCH_SIZE: z.coerce.number().int().min(1).max(10000).default(500),
  LLM_PROVIDER_SYNC_INTERVAL_MS: z.coerce.number().int().min(0).default(3600000),

  // --- conversations and projects ---

  // --- webhooks (admin API, workers/webhook-delivery) ---
};

export type ConfigShape = z.ZodRawShape;

export class ConfigError extends Error {
  constructor(readonly variable: string, detail: string) {
    super(`invalid configuration: ${variable}: ${detail}`);
    this.name = 'ConfigError';
  }
}

/** Parses `env` against `shape`; throws ConfigError naming the first bad variable. */
export function loadConfig<S extends ConfigShape>(
  shape: S,
  env: NodeJS.ProcessEnv = process.env,
): z.infer<z.ZodObject<S>> {
  const input: Record<string, string | undefined> = {};
  for (const key of Object.keys(shape)) {
    const value = env[key];
    // An empty variable means "unset" (common in compose files and CI matrices).
    input[key] = value === '' ? undefined : value;
  }
  const result = z.object(shape).safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const variable = String(issue.path[0] ?? 'environment');
    const raw = input[variable];
    const detail = raw === undefined ? `${issue.message} (variable is not set)` : `${issue.message} (got "${redact(variable, raw)}")`;
    throw new ConfigError(variable, detail);
  }
  return result.data as z.infer<z.ZodObject<S>>;
}

export const loadBaseConfig = (env: NodeJS.ProcessEnv = process.env) => loadConfig(baseConfigShape, env);
export type BaseConfig = ReturnType<typeof loadBaseConfig>;

/** Internal address of a service: its explicit URL setting, else loopback on its port. */
export function serviceUrls(config: BaseConfig) {
  const local = (p: number) => `http://127.0.0.1:${p}`;
  return {
    llmApi: config.LLM_API_URL ?? local(config.LLM_API_PORT),
    responseApi: config.RESPONSE_API_URL ?? local(config.RESPONSE_API_PORT),
    mediaApi: config.MEDIA_API_URL ?? local(config.MEDIA_API_PORT),
    mcpTools: config.MCP_TOOLS_URL ?? local(config.MCP_TOOLS_PORT),
  };
}

function redact(variable: string, value: string): string {
  return /SECRET|KEY|PASSWORD|TOKEN|URL/.test(variable) ? '<redacted>' : value.slice(0, 80);
}

/** Prints the one-line reason and exits 1; used by every main.ts. */
export function exitOnConfigError(error: unknown): never {
  if (error instanceof ConfigError) {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
  throw error;
}
