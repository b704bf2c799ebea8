import { isPending, MAX_RETRY_AFTER_SECONDS, SHOULD_RETRY_HEADER, systemClock, USER_REVOCATION_PREFIX, type Clock, type MaybePromise, type RevocationChannel } from '../../services/kit/core/index.js';
import { apiKeyHash, deny, firstHeader } from '../core/index.js';
import { CONTINUE, silentLogger, type Decision, type EdgeRequest, type PluginCore, type PluginLogger, type TierLimits, type VerifiedIdentity } from '../core/index.js';
import { ipv6Prefix } from '../core/index.js';
import { identityOf, personOf } from '../core/index.js';
import { ownKeyLimits, periodLimits } from './key-limits.js';
import type { CounterStore, CounterWindow, HitResult } from './policies/index.js';
import type { TieredRateLimitConfig } from './schema.js';

export const PRIORITY = 910; // like Kong's rate-limiting: after authentication

export const HEADERS = {
  ipLimit: 'X-RateLimit-Limit-minute',
  ipRemaining: 'X-RateLimit-Remaining-minute',
  limit: 'X-RateLimit-Limit',
  remaining: 'X-RateLimit-Remaining',
  reset: 'X-RateLimit-Reset',
  retryAfter: 'Retry-After',
  shouldRetry: SHOULD_RETRY_HEADER,
} as const;

/** The API key formats api-key-auth accepts (in its `header_name`, `key_header_names` here, or Authorization: Bearer sk_…). */
const KEY_FORMAT = /^sk_[0-9A-Za-z]{32}$/;
const BEARER_KEY = /^Bearer\s+(sk_\S*)\s*$/i;
/** How long a key seen valid is remembered (exempt or not) without being validated again. */
const KEY_MEMORY_MS = 60_000;
const KEY_MEMORY_MAX = 10_000;

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

interface Window extends CounterWindow {
  scope: 'ip' | 'tier';
  period: 'minute' | 'hour' | 'day';
  resetAt: number;
}

/**
 * The configuration an instance runs with at its scope, decided once when the host builds it (no
 * cost per request). Both hosts run a plugin's rewrite phase for global instances only (Kong's
 * plugins iterator; `rewriteChain` in services/gateway/chain.ts), so a route-, service- or
 * consumer-scoped instance left on `ip_limit_phase: rewrite` would count no address at all: a
 * scoped instance counts addresses in the access phase whatever `ip_limit_phase` says. A global
 * one keeps the configured phase.
 */
export function configAtScope(config: TieredRateLimitConfig, scoped: boolean): TieredRateLimitConfig {
  return scoped && config.ip_limit_phase !== 'access' ? { ...config, ip_limit_phase: 'access' } : config;
}

/**
 * Per-address limits for everyone (in the rewrite phase by default: before authentication, so
 * refused credentials count too; IPv6 clients by /64), plus tier limits in the access phase, per
 * person whichever credential was used (`personOf`): API keys by the key's tier, with the limits an
 * administrator set on the key in place of the tier's (`custom_limit_tiers`, every tier by
 * default), tokens by the user tier (guests: guest tier; unverified accounts: the unverified
 * tier). Paths in `exempt_paths` (health probes) count nowhere.
 * Fixed windows aligned to the clock (minute, hour, UTC day). Over a limit → 429 shape A with Retry-After;
 * `insufficient_quota` when the daily quota is spent; `x-should-retry: false` when the wait is
 * over 60 s. Backend failure → the configured fault policy.
 *
 * API keys of `ip_exempt_tiers` (enterprise) and of administrators (`ip_exempt_admins`) are never
 * held to the per-address limit: a server behind one address may send as much as its key allows.
 * The per-address count runs before authentication, so the exemption works in two steps:
 * - a key seen exempt in the last minute is not counted before authentication (its hash is
 *   remembered in this process, and so is whether it was exempt on its last request): the count
 *   is left to the access phase, which drops it only when that key authenticated the request, so a
 *   known exempt key carried to a public route (where no auth plugin checks it) buys nothing;
 * - a request carrying a key not yet known, from an address over its limit, is not refused at once:
 *   the refusal is put off until the key is checked, then dropped for an exempt key and sent
 *   otherwise. Such deferrals are counted per address and window and capped at the limit itself,
 *   so a flood of made-up keys costs at most that many extra key checks before it is refused outright.
 *
 * Once the limiter follows the revocation channel (`attach`, as the embedded edge does), a key seen
 * valid and not exempt in the last minute, presented as the request's only credential, has its
 * per-address count moved to the access phase, where the address and tier windows go to the
 * counters in one call: one round trip to Redis per request instead of two. Such a request is
 * refused by the authentication plugins only when its key stopped being valid, and a revocation
 * makes the limiter forget the key at once, so its next request is counted in the rewrite phase
 * again. A request answered before that access phase (the host's 404 or 405, a preflight, an
 * earlier plugin's refusal) is counted all the same: the embedded edge calls `settleRewrite` first.
 * Kong has no such step, so there a request answered before this access phase drops the count a
 * known exempt key left to it (the only count a Kong node leaves, as it does not attach). The remembered keys, exempt or not, are forgotten on every revocation message that names
 * them (or their user), and all of them when the subscription was lost.
 */
export function createTieredRateLimit(
  config: TieredRateLimitConfig,
  deps: { store: CounterStore; clock?: Clock; logger?: PluginLogger },
): PluginCore & { attach(channel: RevocationChannel): Promise<void> } {
  const clock = deps.clock ?? systemClock;
  const logger = deps.logger ?? silentLogger;
  const prefix = config.redis_prefix;

  /** The tier of the request's credential: an API key's own tier; for tokens guest, unverified or user tier. */
  function tierOf(identity: VerifiedIdentity): string {
    if (identity.authMethod === 'apikey') return identity.tier ?? config.default_key_tier;
    if (identity.isGuest) return config.guest_tier;
    if (identity.emailVerified === false) return config.unverified_user_tier ?? config.guest_tier;
    return config.user_tier;
  }

  /**
   * Tier buckets of the request. Every request counts against its person's bucket
   * (`user:<personOf>`: the id the user's tokens carry, whichever credential it used), with the
   * limits of its credential: rotating or recreating keys, or mixing keys and tokens, never buys
   * more. Limits an administrator set on a key (of a tier in `custom_limit_tiers`, every tier by
   * default) replace its tier's for that key, period by period (`periodLimits`): a lower one is
   * counted on the key's own bucket, a higher one is what the person's bucket is checked against.
   */
  function tierBuckets(request: EdgeRequest): Array<{ bucket: string; limits: TierLimits }> {
    const identity = identityOf(request.shared);
    if (!identity) return [];
    const tierName = tierOf(identity);
    const tier = tiers.get(tierName) ?? tiers.get(config.default_key_tier) ?? {};
    const person = `user:${personOf(identity)}`;
    if (identity.authMethod !== 'apikey' || !identity.limits || !customLimitTiers.has(tierName)) {
      return [{ bucket: person, limits: { minute: tier.minute ?? null, day: tier.day ?? null } }];
    }
    const own = ownKeyLimits(identity.limits);
    const minute = periodLimits(tier.minute, own.minute);
    const day = periodLimits(tier.day, own.day);
    const buckets = [{ bucket: person, limits: { minute: minute.user, day: day.user } }];
    if (minute.key !== null || day.key !== null) buckets.push({ bucket: identity.bucket, limits: { minute: minute.key, day: day.key } });
    return buckets;
  }

  function windowsFor(request: EdgeRequest, now: number, phase: 'rewrite' | 'access', countIp: boolean): Window[] {
    const windows: Window[] = [];
    const minuteStart = now - (now % MINUTE);
    const hourStart = now - (now % HOUR);
    const dayStart = now - (now % DAY);
    if (countIp) {
      const address = addressBucket(request.clientIp);
      if (config.ip_per_minute > 0) {
        windows.push({ scope: 'ip', period: 'minute', key: `${prefix}:rl:ip:${address}:m:${minuteStart}`, limit: config.ip_per_minute, ttlMs: 2 * MINUTE, resetAt: minuteStart + MINUTE });
      }
      if (config.ip_per_hour > 0) {
        windows.push({ scope: 'ip', period: 'hour', key: `${prefix}:rl:ip:${address}:h:${hourStart}`, limit: config.ip_per_hour, ttlMs: HOUR + MINUTE, resetAt: hourStart + HOUR });
      }
    }
    if (phase === 'access') {
      for (const { bucket, limits } of tierBuckets(request)) {
        if (limits.minute) windows.push({ scope: 'tier', period: 'minute', key: `${prefix}:rl:${bucket}:m:${minuteStart}`, limit: limits.minute, ttlMs: 2 * MINUTE, resetAt: minuteStart + MINUTE });
        if (limits.day) windows.push({ scope: 'tier', period: 'day', key: `${prefix}:rl:${bucket}:d:${dayStart}`, limit: limits.day, ttlMs: DAY + MINUTE, resetAt: dayStart + DAY });
      }
    }
    return windows;
  }

  /** IPv4 addresses as they are; IPv6 by their first `ipv6_prefix_length` bits (a client usually holds a whole /64). */
  function addressBucket(ip: string): string {
    return ip.includes(':') ? ipv6Prefix(ip, config.ipv6_prefix_length) : ip;
  }

  function headersFor(windows: Window[], counts: number[]): Record<string, string> {
    const headers: Record<string, string> = {};
    if (config.hide_client_headers) return headers;
    let tightest = -1;
    windows.forEach((w, i) => {
      const remaining = Math.max(0, w.limit - counts[i]!);
      if (w.scope === 'ip') {
        if (w.period === 'minute') {
          headers[HEADERS.ipLimit] = String(w.limit);
          headers[HEADERS.ipRemaining] = String(remaining);
        }
      } else if (tightest < 0 || remaining < Math.max(0, windows[tightest]!.limit - counts[tightest]!)) {
        tightest = i;
      }
    });
    if (tightest >= 0) {
      const w = windows[tightest]!;
      headers[HEADERS.limit] = String(w.limit);
      headers[HEADERS.remaining] = String(Math.max(0, w.limit - counts[tightest]!));
      headers[HEADERS.reset] = String(Math.ceil(w.resetAt / 1000));
    }
    return headers;
  }

  const customLimitTiers = new Set(config.custom_limit_tiers);
  /** The configured tiers by name: only those (a validator's tier named `constructor` is no tier of ours). */
  const tiers = new Map(Object.entries(config.tiers));
  const exempt = new Set(config.exempt_paths);
  const exemptTiers = new Set(config.ip_exempt_tiers);
  /** api-key-auth's `header_name` (lower-case, as both hosts hand header names to the cores). */
  const keyHeaders = config.key_header_names.map((name) => name.toLowerCase());
  /** Key hash → until when it is known without being checked again, and whether it was exempt (insertion order: first seen, the first evicted past the bound). */
  const knownKeys = new Map<string, { until: number; exempt: boolean; userId: string }>();
  const unsubscribers: Array<() => Promise<void>> = [];
  /** The rewrite's answer for a known key that is not exempt: count the address in the access phase. */
  const COUNT_IP_AT_ACCESS: Decision = { kind: 'continue', share: { ipCountAtAccess: true } };

  function isExemptKey(identity: VerifiedIdentity | undefined): boolean {
    if (!identity || identity.authMethod !== 'apikey') return false;
    if (config.ip_exempt_admins && identity.isAdmin === true) return true;
    return exemptTiers.has(identity.tier ?? config.default_key_tier);
  }

  /** The well-formed API key a request presents, if any (what api-key-auth will check). */
  function presentedKey(request: EdgeRequest): string | null {
    let header: string | undefined;
    for (const name of keyHeaders) if ((header = firstHeader(request.headers, name))) break;
    const key = header || BEARER_KEY.exec(firstHeader(request.headers, 'authorization') ?? '')?.[1];
    return key && KEY_FORMAT.test(key) ? key : null;
  }

  function remembered(hash: string, now: number): { exempt: boolean } | undefined {
    const known = knownKeys.get(hash);
    if (known === undefined) return undefined;
    if (known.until > now) return known;
    knownKeys.delete(hash);
    return undefined;
  }

  /** Every accepted request of a key renews its entry in place (no allocation per request). */
  function remember(hash: string, exempt: boolean, userId: string, now: number): void {
    const known = knownKeys.get(hash);
    if (known !== undefined) {
      known.until = now + KEY_MEMORY_MS;
      known.exempt = exempt;
      known.userId = userId;
      return;
    }
    knownKeys.set(hash, { until: now + KEY_MEMORY_MS, exempt, userId });
    if (knownKeys.size > KEY_MEMORY_MAX) knownKeys.delete(knownKeys.keys().next().value!);
  }

  /** A revocation message: a key's SHA-256 hex, or `user:<id>` for every key of a user. */
  function forget(message: string): void {
    if (!message.startsWith(USER_REVOCATION_PREFIX)) {
      knownKeys.delete(message);
      return;
    }
    const userId = message.slice(USER_REVOCATION_PREFIX.length);
    for (const [hash, known] of knownKeys) if (known.userId === userId) knownKeys.delete(hash);
  }

  /** The request's credentials are one API key (no other Authorization than that key itself). */
  function onlyCredential(request: EdgeRequest): boolean {
    const authorization = firstHeader(request.headers, 'authorization');
    return authorization === undefined || BEARER_KEY.test(authorization);
  }

  /**
   * Synchronous when the counters are (in-process); a promise when they answer over the network (Redis).
   * `staged`: the address windows (first) and the tier windows are counted as the two hits of the
   * rewrite and access phases would count them, one after the other, in one call to the counters.
   */
  function check(request: EdgeRequest, phase: 'rewrite' | 'access', options: { countIp: boolean; deferrable?: boolean; staged?: boolean }): MaybePromise<Decision> {
    if (exempt.has(request.path)) return CONTINUE;
    const now = clock.now();
    const windows = windowsFor(request, now, phase, options.countIp);
    if (windows.length === 0) return CONTINUE;
    let addressWindows = 0;
    if (options.staged) while (addressWindows < windows.length && windows[addressWindows]!.scope === 'ip') addressWindows++;
    let hit: MaybePromise<HitResult>;
    try {
      // No address window (or not staged) reads as one stage to the stores.
      hit = deps.store.hit(windows, now, addressWindows);
    } catch (error) {
      return storeFailed(error);
    }
    const deferrable = options.deferrable === true;
    if (!isPending(hit)) return addressWindows > 0 ? decideStaged(windows, addressWindows, hit, now) : decide(windows, hit, now, deferrable);
    return hit.then((result) => (addressWindows > 0 ? decideStaged(windows, addressWindows, result, now) : decide(windows, result, now, deferrable)), storeFailed);
  }

  /** A refusal by the address windows reads as the rewrite phase's would (their headers only). */
  function decideStaged(windows: Window[], addressWindows: number, result: HitResult, now: number): MaybePromise<Decision> {
    if (result.allowed || result.blocked >= addressWindows) return decide(windows, result, now, false);
    return decide(windows.slice(0, addressWindows), { ...result, counts: result.counts.slice(0, addressWindows) }, now, false);
  }

  function storeFailed(error: unknown): Decision {
    logger.warn({ err: (error as Error).message, store: deps.store.name, policy: config.fault_policy }, 'tiered-rate-limit: counter store failed');
    if (config.fault_policy === 'deny') return deny(503, 'Rate limiting is temporarily unavailable');
    return CONTINUE;
  }

  function decide(windows: Window[], result: HitResult, now: number, deferrable: boolean): MaybePromise<Decision> {
    const headers = headersFor(windows, result.counts);
    if (result.allowed) return { kind: 'continue', responseHeaders: headers };
    const blocked = windows[result.blocked]!;
    const waitSeconds = Math.max(1, Math.ceil((blocked.resetAt - now) / 1000));
    headers[HEADERS.retryAfter] = String(waitSeconds);
    if (waitSeconds > MAX_RETRY_AFTER_SECONDS) headers[HEADERS.shouldRetry] = 'false';
    const daily = blocked.period === 'day';
    const message = daily
      ? `Daily quota of ${blocked.limit} requests exhausted; it resets in ${waitSeconds} seconds`
      : `Rate limit exceeded: ${blocked.limit} requests per ${blocked.period}${blocked.scope === 'ip' ? ' from this address' : ''}`;
    const code = daily ? 'insufficient_quota' : 'rate_limit_exceeded';
    const refusal = deny(429, message, { code, headers });
    if (!deferrable || blocked.scope !== 'ip') return refusal;
    return mayDefer(blocked, now).then((deferred): Decision => (deferred ? { kind: 'continue', share: { deferredIpRefusal: { status: 429, message, code, headers } } } : refusal));
  }

  /** One more deferral for this address and window, while under the cap (the window's own limit). */
  async function mayDefer(blocked: Window, now: number): Promise<boolean> {
    try {
      const result = await deps.store.hit([{ key: `${blocked.key}:deferred`, limit: blocked.limit, ttlMs: blocked.ttlMs }], now);
      return result.allowed;
    } catch {
      return false;
    }
  }

  function rewrite(request: EdgeRequest): MaybePromise<Decision> {
    if (config.ip_limit_phase !== 'rewrite') return CONTINUE;
    const key = presentedKey(request);
    if (key) {
      const known = remembered(apiKeyHash(request, key), clock.now());
      // Exempt only if the key turns out to authenticate this request: on a public route (where no
      // auth plugin checks it) or when it is refused, the access phase (or the host's settle) counts
      // the address after all. Needs no revocation channel, unlike the line below: a host that
      // cannot settle (Kong, after a refusal) loses no count this request would otherwise have had.
      if (known?.exempt) return COUNT_IP_AT_ACCESS;
      if (known && unsubscribers.length > 0 && onlyCredential(request)) return COUNT_IP_AT_ACCESS;
    }
    return check(request, 'rewrite', { countIp: true, deferrable: key !== null });
  }

  function access(request: EdgeRequest): MaybePromise<Decision> {
    const key = request.shared.apikey;
    const keyExempt = isExemptKey(key);
    if (key?.bucket.startsWith('key:')) remember(key.bucket.slice(4), keyExempt, key.userId, clock.now());
    const deferred = request.shared.deferredIpRefusal;
    if (deferred && !keyExempt) return deny(deferred.status, deferred.message, { code: deferred.code, headers: deferred.headers });
    const moved = !keyExempt && request.shared.ipCountAtAccess === true;
    return check(request, 'access', { countIp: moved || (!keyExempt && config.ip_limit_phase === 'access'), staged: moved });
  }

  /**
   * The per-address count the rewrite left to the access phase, made now because the request is
   * answered before that phase (the embedded edge's own 404 and 405, a CORS preflight, a refusal
   * by an earlier plugin) or another instance takes it: counted and refused as the rewrite would
   * have, so a known key never makes a request the edge answers itself free of the address limit.
   */
  function settleRewrite(request: EdgeRequest): MaybePromise<Decision> {
    if (request.shared.ipCountAtAccess !== true) return CONTINUE;
    const counted = check(request, 'rewrite', { countIp: true });
    return isPending(counted) ? counted.then(settled) : settled(counted);
  }

  /** Follows the revocation channel, which lets a known key's per-address count move to the access phase. */
  async function attach(channel: RevocationChannel): Promise<void> {
    unsubscribers.push(await channel.subscribe({ onRevoked: forget, onResync: () => knownKeys.clear() }));
  }

  async function close(): Promise<void> {
    for (const unsubscribe of unsubscribers.splice(0)) await unsubscribe().catch(() => {});
    await deps.store.close();
  }

  return { rewrite, access, settleRewrite, attach, close };
}

/** The count is made: the access phase must not count the address again. */
const SETTLED = Object.freeze({ ipCountAtAccess: false });

function settled(decision: Decision): Decision {
  return decision.kind === 'respond' ? decision : { kind: 'continue', responseHeaders: decision.responseHeaders, share: SETTLED };
}
