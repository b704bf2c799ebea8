import { z } from 'zod';
import { ConfigError, loadConfig } from '../config.js';
import { parseMasterKey } from '../crypto-box.js';
import { destinationList } from '../egress.js';
import { trustedPeers } from '../ip.js';
import { DEFAULT_EMBEDDED_BUFFERS_MB, DEFAULT_EMBEDDED_PREPARED_STATEMENTS } from '../db/pglite-remote.js';
import { DEFAULT_REDIS_PREFIX } from '../revocations.js';

/**
 * kit/settings: the settings every service and worker shares (`baseConfigShape`), the zod helpers
 * services declare their own settings with, and the internal addresses derived from them. Kept out
 * of kit/core so that importing kit/core (plugins, the edge's hot path) does not load zod.
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

/** A csv setting whose entries `parse` accepts (the parser the setting's user runs, so there is one). */
const checkedCsv = (parse: (entries: string[]) => unknown) =>
  csv.superRefine((entries, ctx) => {
    try {
      parse(entries);
    } catch (error) {
      ctx.addIssue({ code: 'custom', message: (error as Error).message });
    }
  });

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
  /** PostgreSQL: a statement running longer is cancelled by the server; one whose answer never comes (stalled server or network) fails on the client a little later. Either answers 503. 0 = no limit. */
  DATABASE_QUERY_TIMEOUT_MS: z.coerce.number().int().min(0).default(30000),
  /** PostgreSQL: opening a connection, or waiting for a free one in the pool, fails (503) after this long. */
  DATABASE_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(1).default(10000),
  /** The embedded database only (no DATABASE_URL): its buffer pool in MiB (PostgreSQL's `shared_buffers`). */
  DATABASE_EMBEDDED_BUFFERS_MB: z.coerce.number().int().min(1).max(1024).default(DEFAULT_EMBEDDED_BUFFERS_MB),
  /** The embedded database only: how many repeated statements it keeps parsed and planned (named prepared statements). 0 = none. */
  DATABASE_EMBEDDED_PREPARED_STATEMENTS: z.coerce.number().int().min(0).max(1000).default(DEFAULT_EMBEDDED_PREPARED_STATEMENTS),
  AMQP_URL: optionalUrl,
  BUS_EXCHANGE: z.string().min(1).default('platform.events'),
  BUS_QUEUE_PREFIX: z.string().default(''),
  BUS_PREFETCH: z.coerce.number().int().min(1).max(1000).default(32),
  BUS_POLL_MS: z.coerce.number().int().min(10).default(250),
  OUTBOX_POLL_MS: z.coerce.number().int().min(10).default(500),
  /** Published outbox events older than this are deleted (unpublished ones never are). */
  OUTBOX_RETENTION_HOURS: z.coerce.number().int().min(1).max(24 * 90).default(24),
  /**
   * The embedded database only (one process owns it, so every job and event is announced in the
   * process): the queue's shared look and the outbox relay back off while they find nothing,
   * doubling their wait up to this. 0 = no backoff.
   */
  EMBEDDED_IDLE_POLL_MAX_MS: z.coerce.number().int().min(0).max(60_000).default(2000),
  REDIS_URL: optionalUrl,
  /**
   * Prefix of the edge's Redis keys (rate-limit counters), which also names the deployment's
   * revocation channel (`revocationChannelFor`): platform-wide, since llm-api publishes on the
   * channel the edge and the services listen on.
   */
  EDGE_REDIS_PREFIX: z.string().min(1).default(DEFAULT_REDIS_PREFIX),
  /** Sent as a header on every request the edge forwards: visible ASCII only, or every request would fail at send time. */
  GATEWAY_SHARED_SECRET: z
    .string()
    .min(32, 'at least 32 characters')
    .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces (it travels in a header)')
    .optional(),
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
  /** Deepest nesting of arrays/objects accepted in any JSON body (deeper: 400 before parsing). */
  JSON_MAX_DEPTH: z.coerce.number().int().min(1).max(1000).default(64),
  /** Idle keep-alive connections are closed after this long (above common load-balancer idle timeouts). */
  HTTP_KEEP_ALIVE_TIMEOUT_MS: z.coerce.number().int().min(1).default(65000),
  /** A connection must deliver a request's complete headers within this long (bounds slowloris and never-used connections). */
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(1).default(20000),
  /** A request's body must be fully received within this long (the answer, e.g. a stream, is not limited). 0 = no limit. */
  HTTP_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(0).default(300000),
  /**
   * Connections the kernel may hold for a server before it accepts them (the listen backlog; the
   * kernel caps it at net.core.somaxconn). Node's 511 overflowed while thousands of clients connected
   * at once: the kernel then drops their handshakes, and each waits a SYN retransmit (1 s, 3 s, 7 s…).
   */
  HTTP_LISTEN_BACKLOG: z.coerce.number().int().min(1).max(65535).default(4096),
  EGRESS_ALLOW_HOSTS: checkedCsv(destinationList),
  TRUSTED_PROXIES: checkedCsv(trustedPeers),
  METRICS_ENABLED: bool(true),

  // --- tokens: issued by llm-api, verified by the edge (both read these two) ---
  /** Unset: `http://localhost:<GATEWAY_PORT>`, the edge's address (tokens, discovery and the edge agree on it). Set it to the public URL in production. */
  JWT_ISSUER: z.string().min(1).optional(),
  JWT_AUDIENCE: z.string().min(1).default('ai-gateway'),

  // --- secrets at rest (provider keys, signing keys, webhook secrets) ---
  /** AES-256-GCM key for provider API keys (32 bytes as base64 or 64 hex chars); unset: generated once under DATA_DIR. */
  MASTER_KEY: z
    .string()
    .superRefine((value, ctx) => {
      try {
        parseMasterKey(value);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be 32 bytes as 64 hex characters or base64' });
      }
    })
    .optional(),
};

/**
 * Settings that only work together, whichever owner reads them: all of a group set, or none. A
 * partial group would otherwise fall back silently (the Keycloak driver needs its URL to be chosen
 * at all) or fail only once its owner starts, after the database and the bus opened.
 */
export const settingGroups: ReadonlyArray<{ names: readonly string[]; what: string }> = [
  { names: ['KEYCLOAK_URL', 'KEYCLOAK_REALM', 'KEYCLOAK_CLIENT_ID', 'KEYCLOAK_CLIENT_SECRET'], what: 'the Keycloak identity provider' },
];

/**
 * Throws a ConfigError, one line, for the first group set only in part: it names the first missing
 * variable (ConfigError's own), the ones set and every missing one; never a value. An empty
 * variable is unset, as for `loadConfig`.
 */
export function checkSettingGroups(env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>, groups = settingGroups): void {
  for (const { names, what } of groups) {
    const missing = names.filter((name) => !env[name]);
    if (missing.length === 0 || missing.length === names.length) continue;
    const set = names.filter((name) => env[name]);
    throw new ConfigError(
      missing[0]!,
      `not set, but ${set.join(', ')} ${set.length === 1 ? 'is' : 'are'}: ${what} needs ${names.join(', ')} all set, or none of them (missing: ${missing.join(', ')})`,
    );
  }
}

/**
 * The platform-wide settings, plus `env`: the environment they were read from. A service with its
 * own settings parses its shape from that same environment (`loadConfig(shape, config.env)`), so a
 * test that configures a platform with overrides configures every service the same way.
 */
export const loadBaseConfig = (env: NodeJS.ProcessEnv = process.env) => {
  const parsed = loadConfig(baseConfigShape, env);
  // Every entry point (npm start, a service or worker alone) reads these first: a partial group
  // stops the start here, before anything opens.
  checkSettingGroups(env);
  return {
    ...parsed,
    // Derived, not a fixed default: with the edge on another port the issuer's URLs follow it.
    JWT_ISSUER: parsed.JWT_ISSUER ?? `http://localhost:${parsed.GATEWAY_PORT}`,
    env: Object.freeze({ ...env }) as Readonly<NodeJS.ProcessEnv>,
  };
};
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
