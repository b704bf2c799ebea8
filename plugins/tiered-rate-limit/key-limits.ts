import type { TierLimits } from '../core/index.js';

/**
 * What the key validator (llm-api) reports as a key's limits when nobody set limits on it: its
 * tier's defaults, the values of SPEC.md section 8 (`TIER_DEFAULTS` in
 * services/llm-api/identity/api-keys/tiers.ts; test/plugins/key-own-limits.test.ts keeps the two
 * equal). The validator reports a key's effective limits (the tier's defaults with the key's own
 * over them, field by field), so a reported value that differs from these is one an administrator
 * set on the key. `null`: no limit.
 */
export const VALIDATOR_TIER_DEFAULTS: Readonly<Record<string, { readonly minute: number | null; readonly day: number | null }>> = {
  free: { minute: 3, day: 50 },
  pro: { minute: 60, day: 100000 },
  enterprise: { minute: null, day: null },
};

/** A key's own limit for one period: a number, `null` (no limit) or `undefined` (none set: the tier's applies). */
export type OwnLimit = number | null | undefined;

/**
 * The limits an administrator set on a key, period by period, from the validator's answer: the
 * reported values that differ from the tier's defaults. For a tier the validator does not define,
 * every reported number is the key's own, and a reported `null` never lifts the tier's limit.
 */
export function ownKeyLimits(tier: string, reported: TierLimits | null | undefined): { minute: OwnLimit; day: OwnLimit } {
  if (!reported) return { minute: undefined, day: undefined };
  const defaults = Object.hasOwn(VALIDATOR_TIER_DEFAULTS, tier) ? VALIDATOR_TIER_DEFAULTS[tier] : undefined;
  return { minute: own(reported.minute, defaults?.minute, defaults !== undefined), day: own(reported.day, defaults?.day, defaults !== undefined) };
}

function own(value: number | null | undefined, tierDefault: number | null | undefined, knownTier: boolean): OwnLimit {
  if (value === undefined) return undefined;
  if (value === null) return knownTier && tierDefault !== null ? null : undefined;
  // The validator refuses limits below 1; anything else is not a limit it could have set.
  if (!Number.isInteger(value) || value < 1) return undefined;
  return knownTier && value === tierDefault ? undefined : value;
}

/**
 * One period's limits for a request made with a key: `user` for the counter the user's every
 * credential shares, `key` for the key's own counter (null: none). A key's own limit replaces the
 * tier's for that key: a lower one gets a counter of the key's own (the user's counter keeps the
 * tier's limit, so other credentials of the user are not held to it); a higher one (or none) is
 * the limit the user's counter is checked against for this key's requests. Only an administrator
 * can set a key's limits (a user's own `POST /auth/api-keys` with `limits` is refused), so a
 * higher one is an administrator's decision, not a way around the tier.
 */
export function periodLimits(tierLimit: number | null | undefined, ownLimit: OwnLimit): { user: number | null; key: number | null } {
  const tier = tierLimit ? tierLimit : null; // 0, like a missing period, is no limit (no window is counted)
  if (ownLimit === undefined) return { user: tier, key: null };
  if (ownLimit !== null && (tier === null || ownLimit < tier)) return { user: tier, key: ownLimit };
  return { user: ownLimit, key: null };
}
