import { systemClock, type Clock } from '../../services/kit/clock.js';
import { deny } from '../core/respond.js';
import { CONTINUE, silentLogger, type Decision, type EdgeRequest, type PluginCore, type PluginLogger, type TierLimits } from '../core/types.js';
import { identityOf } from '../identity-headers/core.js';
import type { CounterStore, CounterWindow } from './policies/index.js';
import type { TieredRateLimitConfig } from './schema.js';

export const PRIORITY = 910; // like Kong's rate-limiting: after authentication

export const HEADERS = {
  ipLimit: 'X-RateLimit-Limit-minute',
  ipRemaining: 'X-RateLimit-Remaining-minute',
  limit: 'X-RateLimit-Limit',
  remaining: 'X-RateLimit-Remaining',
  reset: 'X-RateLimit-Reset',
  retryAfter: 'Retry-After',
  shouldRetry: 'x-should-retry',
} as const;

const MINUTE = 60_000;
const DAY = 86_400_000;

interface Window extends CounterWindow {
  scope: 'ip' | 'tier';
  period: 'minute' | 'day';
  resetAt: number;
}

/**
 * Per-IP limit for everyone (in the rewrite phase by default: before authentication, so refused
 * credentials count too), plus per-credential tier limits in the access phase: API keys by the key's tier (limits
 * from `tiers`; for `custom_limit_tiers`, e.g. enterprise, the limits carried on the key), JWT callers per user by the configured user tier (guests: guest tier). Fixed
 * windows aligned to the clock (minute, UTC day). Over a limit → 429 shape A with Retry-After;
 * `insufficient_quota` when the daily quota is spent; `x-should-retry: false` when the wait is
 * over 60 s. Backend failure → the configured fault policy.
 */
export function createTieredRateLimit(
  config: TieredRateLimitConfig,
  deps: { store: CounterStore; clock?: Clock; logger?: PluginLogger },
): PluginCore {
  const clock = deps.clock ?? systemClock;
  const logger = deps.logger ?? silentLogger;
  const prefix = config.redis_prefix;

  function limitsFor(request: EdgeRequest): { bucket: string; limits: TierLimits } | null {
    const identity = identityOf(request.shared);
    if (!identity) return null;
    let tierName: string;
    if (identity.authMethod === 'apikey') tierName = identity.tier ?? config.default_key_tier;
    else tierName = identity.isGuest ? config.guest_tier : config.user_tier;
    if (identity.authMethod === 'apikey' && identity.limits && config.custom_limit_tiers.includes(tierName)) {
      return { bucket: identity.bucket, limits: identity.limits };
    }
    const tier = config.tiers[tierName] ?? config.tiers[config.default_key_tier] ?? {};
    return { bucket: identity.bucket, limits: { minute: tier.minute ?? null, day: tier.day ?? null } };
  }

  function windowsFor(request: EdgeRequest, now: number, phase: 'rewrite' | 'access'): Window[] {
    const windows: Window[] = [];
    const minuteStart = now - (now % MINUTE);
    const dayStart = now - (now % DAY);
    if (config.ip_per_minute > 0 && phase === config.ip_limit_phase) {
      windows.push({ scope: 'ip', period: 'minute', key: `${prefix}:rl:ip:${request.clientIp}:m:${minuteStart}`, limit: config.ip_per_minute, ttlMs: 2 * MINUTE, resetAt: minuteStart + MINUTE });
    }
    const tier = phase === 'access' ? limitsFor(request) : null;
    if (tier) {
      const { minute, day } = tier.limits;
      if (minute) windows.push({ scope: 'tier', period: 'minute', key: `${prefix}:rl:${tier.bucket}:m:${minuteStart}`, limit: minute, ttlMs: 2 * MINUTE, resetAt: minuteStart + MINUTE });
      if (day) windows.push({ scope: 'tier', period: 'day', key: `${prefix}:rl:${tier.bucket}:d:${dayStart}`, limit: day, ttlMs: DAY + MINUTE, resetAt: dayStart + DAY });
    }
    return windows;
  }

  function headersFor(windows: Window[], counts: number[]): Record<string, string> {
    const headers: Record<string, string> = {};
    if (config.hide_client_headers) return headers;
    let tightest = -1;
    windows.forEach((w, i) => {
      const remaining = Math.max(0, w.limit - counts[i]!);
      if (w.scope === 'ip') {
        headers[HEADERS.ipLimit] = String(w.limit);
        headers[HEADERS.ipRemaining] = String(remaining);
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

  async function check(request: EdgeRequest, phase: 'rewrite' | 'access'): Promise<Decision> {
    const now = clock.now();
    const windows = windowsFor(request, now, phase);
    if (windows.length === 0) return CONTINUE;
    let result;
    try {
      result = await deps.store.hit(windows, now);
    } catch (error) {
      logger.warn({ err: (error as Error).message, store: deps.store.name, policy: config.fault_policy }, 'tiered-rate-limit: counter store failed');
      if (config.fault_policy === 'deny') return deny(503, 'Rate limiting is temporarily unavailable');
      return CONTINUE;
    }
    const headers = headersFor(windows, result.counts);
    if (result.allowed) return { kind: 'continue', responseHeaders: headers };
    const blocked = windows[result.blocked]!;
    const waitSeconds = Math.max(1, Math.ceil((blocked.resetAt - now) / 1000));
    headers[HEADERS.retryAfter] = String(waitSeconds);
    if (waitSeconds > 60) headers[HEADERS.shouldRetry] = 'false';
    const daily = blocked.period === 'day';
    const message = daily
      ? `Daily quota of ${blocked.limit} requests exhausted; it resets in ${waitSeconds} seconds`
      : `Rate limit exceeded: ${blocked.limit} requests per minute${blocked.scope === 'ip' ? ' from this address' : ''}`;
    return deny(429, message, { code: daily ? 'insufficient_quota' : 'rate_limit_exceeded', headers });
  }

  return {
    rewrite: (request: EdgeRequest) => check(request, 'rewrite'),
    access: (request: EdgeRequest) => check(request, 'access'),
    close: () => deps.store.close(),
  };
}
