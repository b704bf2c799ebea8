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
  /** The decK file the embedded gateway reads (the same file Kong is configured from). */
  EDGE_DECK_FILE: z.string().min(1).default('deck/kong.yaml'),
  /** JWKS of the token issuer; unset: llm-api's internal `/.well-known/jwks.json`. Issuer and audience: JWT_ISSUER, JWT_AUDIENCE. */
  EDGE_JWKS_URL: optionalUrl,
  /** Minimum time between two JWKS refetches caused by an unknown `kid`. */
  EDGE_JWKS_REFRESH_COOLDOWN_SECONDS: z.coerce.number().int().min(0).default(30),
  EDGE_JWT_MAX_LIFETIME_SECONDS: z.coerce.number().int().min(1).max(3600).default(3600),
  EDGE_JWT_CLOCK_SKEW_SECONDS: z.coerce.number().int().min(0).max(300).default(30),
  EDGE_API_KEY_TIMEOUT_MS: z.coerce.number().int().min(1).default(5000),
  /** How long a positive API-key validation is cached (revocations purge it at once). */
  EDGE_API_KEY_CACHE_TTL_SECONDS: z.coerce.number().int().min(0).default(30),
  EDGE_RATE_LIMIT_IP_PER_MINUTE: z.coerce.number().int().min(1).default(100),
  EDGE_RATE_LIMIT_FREE_PER_MINUTE: z.coerce.number().int().min(1).default(3),
  EDGE_RATE_LIMIT_FREE_PER_DAY: z.coerce.number().int().min(1).default(50),
  EDGE_RATE_LIMIT_PRO_PER_MINUTE: z.coerce.number().int().min(1).default(60),
  EDGE_RATE_LIMIT_PRO_PER_DAY: z.coerce.number().int().min(1).default(100000),
  /** Tier applied to JWT callers (per user) and to guest JWT callers. */
  EDGE_RATE_LIMIT_USER_TIER: z.enum(['free', 'pro', 'enterprise']).default('pro'),
  EDGE_RATE_LIMIT_GUEST_TIER: z.enum(['free', 'pro', 'enterprise']).default('free'),
  /** What the limiter does when Redis fails mid-flight: allow (and log) or deny with 503. */
  EDGE_RATE_LIMIT_FAULT_POLICY: z.enum(['allow', 'deny']).default('allow'),
  /** Prefix of the edge's Redis keys (rate-limit counters). */
  EDGE_REDIS_PREFIX: z.string().min(1).default('edge'),
  /** Allowed CORS origins (comma list; `*` for any). */
  EDGE_CORS_ORIGINS: z.string().min(1).default('*'),
  EDGE_UPSTREAM_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(1).default(5000),
  /** Upstream read timeout (no bytes for this long → 504); long enough for slow LLM streams. */
  EDGE_UPSTREAM_READ_TIMEOUT_MS: z.coerce.number().int().min(1).default(300000),

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
  /** Delays before attempts 2..n after a failed attempt (SPEC.md 6.6); units ms, s, m, h, d. */
  WEBHOOK_RETRY_SCHEDULE: z
    .string()
    .default('5s,25s,2m,10m,50m,4h,24h')
    .transform((value, ctx) => {
      const steps = value.split(',').map((part) => part.trim()).filter(Boolean);
      const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
      const out: number[] = [];
      for (const step of steps) {
        const match = /^(\d+)(ms|s|m|h|d)$/.exec(step);
        if (!match) {
          ctx.addIssue({ code: 'custom', message: `"${step}" is not a duration such as 500ms, 5s, 2m, 4h` });
          return z.NEVER;
        }
        out.push(Number(match[1]) * units[match[2]!]!);
      }
      return out;
    }),
  /** Per-attempt HTTP timeout (whole request, headers and body). */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(1).default(10000),
  /** How long the previous secret still signs deliveries after a rotation. */
  WEBHOOK_SECRET_GRACE_SECONDS: z.coerce.number().int().min(0).default(86400),
  /** Attempts in flight at once per subscription (one slow receiver never blocks the others). */
  WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: z.coerce.number().int().min(1).max(1000).default(8),
  /** Delivery jobs a worker holds at once (AMQP prefetch of the delivery queue). */
  WEBHOOK_PREFETCH: z.coerce.number().int().min(1).max(1000).default(64),
  /** A job whose subscription is at its concurrency limit waits this long before it is offered again. */
  WEBHOOK_BUSY_DELAY_MS: z.coerce.number().int().min(1).default(1000),
  /** Re-enqueues pending deliveries whose next attempt is overdue by WEBHOOK_SWEEP_GRACE_MS (0 disables). */
  WEBHOOK_SWEEP_INTERVAL_MS: z.coerce.number().int().min(0).default(60000),
  WEBHOOK_SWEEP_GRACE_MS: z.coerce.number().int().min(0).default(300000),
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
