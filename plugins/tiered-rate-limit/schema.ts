import { applySchema, SchemaError, type KongFieldEntry } from '../core/index.js';

export const DEFAULT_TIERS: Record<string, { minute?: number; day?: number }> = {
  free: { minute: 3, day: 50 },
  pro: { minute: 60, day: 100000 },
  enterprise: {},
};

export const Schema: KongFieldEntry[] = [
  /** Requests per client IP per minute (0 disables the per-IP limit). */
  { ip_per_minute: { type: 'integer', default: 100, between: [0, 100000000] } },
  /**
   * `rewrite`: the per-IP limit counts every request before authentication (so floods of bad
   * credentials are limited too); a global instance only (Kong runs rewrite only for global
   * plugins): a route-, service- or consumer-scoped instance counts addresses in the access phase
   * whatever this says (`configAtScope`). `access`: counted with the tier limits, after authentication.
   */
  /** Requests per client address per hour (0: none). Used on its own by the guest-login route. */
  { ip_per_hour: { type: 'integer', default: 0, between: [0, 100000000] } },
  /** IPv6 clients share one address bucket per prefix of this length (a client usually holds a /64). */
  { ipv6_prefix_length: { type: 'integer', default: 64, between: [1, 128] } },
  /** Exact paths that count against no limit (health and readiness probes). */
  { exempt_paths: { type: 'set', elements: { type: 'string' }, default: [] } },
  { ip_limit_phase: { type: 'string', default: 'rewrite', one_of: ['rewrite', 'access'] } },
  /** API keys of these tiers never count against, nor are refused by, the per-address limit. */
  { ip_exempt_tiers: { type: 'set', elements: { type: 'string' }, default: ['enterprise'] } },
  /** Same for API keys of administrators, whatever the key's tier. */
  { ip_exempt_admins: { type: 'boolean', default: true } },
  /**
   * The headers an API key arrives in before authentication (besides `Authorization: Bearer sk_…`):
   * api-key-auth's `header_name`, which must be listed here when it is changed, or a key sent in it
   * reads as no key in the rewrite phase (an exempt key counted against, and refused by, the
   * per-address limit).
   */
  { key_header_names: { type: 'set', elements: { type: 'string' }, default: ['x-api-key'] } },
  /** Tier → limits; a missing or null period is unlimited. Limits an administrator set on a key replace them for that key (`custom_limit_tiers`). */
  {
    tiers: {
      type: 'map',
      keys: { type: 'string' },
      values: {
        type: 'record',
        fields: [{ minute: { type: 'integer', between: [0, 100000000] } }, { day: { type: 'integer', between: [0, 1000000000] } }],
      },
      default: DEFAULT_TIERS,
    },
  },
  { user_tier: { type: 'string', default: 'pro' } },
  { guest_tier: { type: 'string', default: 'free' } },
  /** Token callers whose token says `email_verified: false` (an upgraded guest nobody verified); unset: the guest tier. */
  { unverified_user_tier: { type: 'string' } },
  { default_key_tier: { type: 'string', default: 'free' } },
  /**
   * Keys of these tiers are held to the limits an administrator set on them (the validator's
   * `limits` that differ from the tier's defaults), in place of the tier's, period by period; keys
   * of other tiers to `tiers` only. Every tier the validator knows by default.
   */
  { custom_limit_tiers: { type: 'set', elements: { type: 'string' }, default: ['free', 'pro', 'enterprise'] } },
  { policy: { type: 'string', default: 'local', one_of: ['local', 'redis'] } },
  { redis_url: { type: 'string', referenceable: true } },
  { redis_prefix: { type: 'string', default: 'edge' } },
  /**
   * Longest wait for one Redis command (and at least 1 s for connecting); past it `fault_policy`
   * decides, so a slow Redis costs each request at most this long.
   */
  { redis_timeout_ms: { type: 'integer', default: 200, between: [1, 60000] } },
  /**
   * Redis failing mid-flight: `deny` (503; the default, since no limit holds while the counters
   * cannot be read) or `allow` (serve uncounted and log, like Kong's fault_tolerant).
   */
  { fault_policy: { type: 'string', default: 'deny', one_of: ['allow', 'deny'] } },
  { hide_client_headers: { type: 'boolean', default: false } },
];

export interface TierConfig {
  minute?: number | null;
  day?: number | null;
}

export interface TieredRateLimitConfig {
  ip_per_minute: number;
  ip_per_hour: number;
  ipv6_prefix_length: number;
  exempt_paths: string[];
  ip_limit_phase: 'rewrite' | 'access';
  ip_exempt_tiers: string[];
  ip_exempt_admins: boolean;
  key_header_names: string[];
  tiers: Record<string, TierConfig>;
  user_tier: string;
  guest_tier: string;
  unverified_user_tier?: string;
  default_key_tier: string;
  custom_limit_tiers: string[];
  policy: 'local' | 'redis';
  redis_url?: string;
  redis_prefix: string;
  redis_timeout_ms: number;
  fault_policy: 'allow' | 'deny';
  hide_client_headers: boolean;
}

/**
 * The tier fields that name an entry of `tiers`. One that names none is a configuration error: the
 * limiter would fall back to the default key tier for it, and with that one missing too, to no
 * limit at all (a `tiers` map with other names, and the defaults `pro`/`free` left as they are).
 */
const TIER_FIELDS = ['user_tier', 'guest_tier', 'unverified_user_tier', 'default_key_tier'] as const;

export function parseTieredRateLimitConfig(input: unknown): TieredRateLimitConfig {
  const config = applySchema(Schema, input) as unknown as TieredRateLimitConfig;
  for (const field of TIER_FIELDS) {
    const name = config[field];
    if (name !== undefined && !Object.hasOwn(config.tiers, name)) {
      throw new SchemaError(`config.${field}`, `names no entry of tiers (${Object.keys(config.tiers).join(', ') || 'none'})`);
    }
  }
  return config;
}
