import type { TierLimits } from '../core/index.js';

/** A key's own limit for one period: a number, `null` (no limit) or `undefined` (none set: the tier's applies). */
export type OwnLimit = number | null | undefined;

/**
 * The limits set on a key, period by period, as api-key-auth took them from the validator
 * (`ownLimitsOf`): a whole number of at least 1, `null` (no limit), or unset (the tier's applies;
 * also anything that is not a limit the validator could have set).
 */
export function ownKeyLimits(own: TierLimits | null | undefined): { minute: OwnLimit; day: OwnLimit } {
  if (!own) return { minute: undefined, day: undefined };
  return { minute: ownLimit(own.minute), day: ownLimit(own.day) };
}

function ownLimit(value: number | null | undefined): OwnLimit {
  if (value === undefined || value === null) return value;
  return Number.isInteger(value) && value >= 1 ? value : undefined;
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
