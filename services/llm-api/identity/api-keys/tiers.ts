/**
 * Tiers of API keys and their default limits (SPEC.md section 8). `null` means no limit. An admin
 * may set custom limits on a key; they override the tier's values field by field.
 */
export const TIERS = ['free', 'pro', 'enterprise'] as const;
export type Tier = (typeof TIERS)[number];

export interface Limits {
  requests_per_minute: number | null;
  requests_per_day: number | null;
}

export const TIER_DEFAULTS: Record<Tier, Limits> = {
  free: { requests_per_minute: 3, requests_per_day: 50 },
  pro: { requests_per_minute: 60, requests_per_day: 100_000 },
  enterprise: { requests_per_minute: null, requests_per_day: null },
};

export function effectiveLimits(tier: Tier, custom: Partial<Limits> | null): Limits {
  return { ...TIER_DEFAULTS[tier], ...(custom ?? {}) };
}
