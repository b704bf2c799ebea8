import { z } from 'zod';
import { loadConfig } from '../kit/core/index.js';
import { bool, optionalUrl } from '../kit/settings/index.js';

/**
 * The edge's own settings (README.md "Edge" table). The embedded edge turns them into the `DECK_*`
 * variables deck/kong.yaml reads (deck-vars.ts); on Kong the same values are set as `DECK_*` directly.
 * Issuer and audience (JWT_ISSUER, JWT_AUDIENCE) are platform-wide: the edge verifies what llm-api issues.
 * So is EDGE_REDIS_PREFIX (kit settings): it also names the revocation channel llm-api publishes on.
 */
const int = (min: number) => z.coerce.number().int().min(min);
const tier = z.enum(['free', 'pro', 'enterprise']);

export const edgeConfigShape = {
  /** The decK file the embedded gateway reads (the same file Kong is configured from). */
  EDGE_DECK_FILE: z.string().min(1).default('deck/kong.yaml'),
  /** JWKS of the token issuer; unset: llm-api's internal `/.well-known/jwks.json`. */
  EDGE_JWKS_URL: optionalUrl,
  /** Minimum time between two JWKS refetches caused by an unknown `kid`. */
  EDGE_JWKS_REFRESH_COOLDOWN_SECONDS: int(1).max(86400).default(30),
  /** Longest time a fetched JWKS is trusted before it is fetched again: a key removed by the issuer stops working within it. */
  EDGE_JWKS_MAX_AGE_SECONDS: int(1).max(86400).default(600),
  EDGE_JWT_MAX_LIFETIME_SECONDS: int(1).max(3600).default(3600),
  EDGE_JWT_CLOCK_SKEW_SECONDS: int(0).max(300).default(30),
  EDGE_API_KEY_TIMEOUT_MS: int(1).default(5000),
  /** How long a positive API-key validation is cached (revocations purge it at once). */
  EDGE_API_KEY_CACHE_TTL_SECONDS: int(0).default(30),
  EDGE_RATE_LIMIT_IP_PER_MINUTE: int(1).default(100),
  EDGE_RATE_LIMIT_FREE_PER_MINUTE: int(1).default(3),
  EDGE_RATE_LIMIT_FREE_PER_DAY: int(1).default(50),
  EDGE_RATE_LIMIT_PRO_PER_MINUTE: int(1).default(60),
  EDGE_RATE_LIMIT_PRO_PER_DAY: int(1).default(100000),
  /** Tier applied to JWT callers (per user) and to guest JWT callers. */
  EDGE_RATE_LIMIT_USER_TIER: tier.default('pro'),
  EDGE_RATE_LIMIT_GUEST_TIER: tier.default('free'),
  /** Tier of token callers whose e-mail nobody verified (upgraded guests); unset: the guest tier. */
  EDGE_RATE_LIMIT_UNVERIFIED_TIER: tier.optional(),
  /** IPv6 clients share one per-address bucket per prefix of this many bits. */
  EDGE_RATE_LIMIT_IPV6_PREFIX: int(1).max(128).default(64),
  /** Guest accounts one client address may create per hour (public guest login). */
  EDGE_GUEST_LOGIN_PER_HOUR: int(1).default(10),
  /** Open connections one client address may hold on the embedded edge (more are closed at once). */
  EDGE_MAX_CONNECTIONS_PER_ADDRESS: int(1).default(256),
  /**
   * Connections one client address may keep open for later (kept alive, or never used): beyond it
   * answers say `Connection: close` (never cutting a connection a client may be reusing), and
   * never-used connections are closed, oldest first.
   */
  EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS: int(0).default(32),
  /**
   * Connections the edge holds open at once, from every address. A request on a connection beyond
   * it is answered 503 (`Retry-After: 1`) and the connection closed, where running out of open
   * files would cut it without an answer. `auto`: half of what the process's open-file limit leaves
   * after a reserve of 512 for its own files and pools, since each request in flight also holds a
   * connection to its service or provider. `0`: no bound.
   */
  EDGE_MAX_CONNECTIONS: z
    .string()
    .default('auto')
    .transform((v, ctx) => {
      const value = v.trim();
      if (value === 'auto') return 'auto' as const;
      if (/^\d+$/.test(value)) return Number(value);
      ctx.addIssue({ code: 'custom', message: 'must be a whole number (0: no bound), or auto' });
      return z.NEVER;
    }),
  /**
   * What the limiter does when Redis fails mid-flight: deny with 503 (the default: while the
   * counters cannot be read, no limit, guest creation's included, would hold), or allow (and log).
   */
  EDGE_RATE_LIMIT_FAULT_POLICY: z.enum(['allow', 'deny']).default('deny'),
  /**
   * Longest wait for one Redis counter command; past it the fault policy decides. Short by default
   * because every request waits for the counter: a slow Redis must not become a slow edge.
   */
  EDGE_RATE_LIMIT_REDIS_TIMEOUT_MS: int(1).max(60000).default(200),
  /**
   * Where the edge's own Prometheus metrics (`GET /metrics`) are served: a listener of their own,
   * apart from the public port, as Kong serves them on its status listener. Loopback by default, so
   * they are not on the internet unless an operator says so.
   */
  EDGE_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  /** Unset: GATEWAY_PORT + 100 (8100 with the default GATEWAY_PORT, Kong's status port; 0 when GATEWAY_PORT is 0). 0: any free port. */
  EDGE_METRICS_PORT: int(0).max(65535).optional(),
  /** Allowed CORS origins (comma list; `*` for any). */
  EDGE_CORS_ORIGINS: z.string().min(1).default('*'),
  /**
   * Upstream timeouts for every service, over the deck's own (`connect_timeout`, `read_timeout`,
   * `write_timeout` of each service). Unset: each service's deck values, else these defaults
   * (UPSTREAM_TIMEOUT_DEFAULTS). Read timeout: no bytes for this long → 504.
   */
  EDGE_UPSTREAM_CONNECT_TIMEOUT_MS: int(1).optional(),
  EDGE_UPSTREAM_READ_TIMEOUT_MS: int(1).optional(),
  EDGE_UPSTREAM_WRITE_TIMEOUT_MS: int(1).optional(),
  /**
   * When a service runs in the edge's own process (`npm start`), hand it the request in process
   * instead of over loopback HTTP. Off: always HTTP (same semantics, one more hop).
   */
  EDGE_IN_PROCESS_DISPATCH: bool(true),
};

/** The upstream timeouts of a service whose deck entry sets none (long enough for slow LLM streams). */
export const UPSTREAM_TIMEOUT_DEFAULTS = { connectTimeoutMs: 5000, readTimeoutMs: 300000, writeTimeoutMs: 300000 } as const;

export type EdgeConfig = z.infer<z.ZodObject<typeof edgeConfigShape>>;

export const loadEdgeConfig = (env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): EdgeConfig => loadConfig(edgeConfigShape, env as NodeJS.ProcessEnv);
