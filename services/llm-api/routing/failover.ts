import { ApiError, MAX_RETRY_AFTER_SECONDS, type CancelSignal } from '../../kit/index.js';
import type { Candidate } from '../models/registry.js';
import type { EndpointConfig } from '../models/types.js';
import { orderEndpoints, type Random } from './select.js';

/**
 * Failover as a pure function of `send(attempt)` and endpoint health: no HTTP here, so the rules
 * are unit-tested with a fake `send`.
 * - The plan: provider models best first; per provider, endpoints by priority, weighted random
 *   among equals; endpoints in a health cool-down only after every healthy one of every provider.
 * - Each attempt's outcome decides: an answer ends the loop and restores the endpoint; a failure
 *   marked `unhealthy` counts against the endpoint; `retry: false` (the request is at fault) ends
 *   the loop at once. `send` decides what an answer is: for a stream, the first body chunk has
 *   arrived. Once `send` returned an answer nothing is retried: what goes wrong after the first
 *   byte is the stream's business, not failover's.
 * - When every attempt failed, the error the client gets is chosen, not merely the last one: if
 *   any provider answered 429, a 429 whose `Retry-After` is the soonest any rate-limited attempt
 *   asked for, in [1, 60] s. A rate limit passes, and the client can usefully retry after it;
 *   a 5xx, a timeout or a provider we cannot call (its key unusable, its credentials refused)
 *   says nothing about when to retry, so it does not hide a 429 tried before it. When not every
 *   failure was a 429, that Retry-After is at most MIXED_FAILURE_RETRY_AFTER_SECONDS. Without any
 *   429: the last failure's error. (A 429 saying the account's quota is spent reaches here as a
 *   provider failure, not a rate limit: chat/dispatch.ts.)
 */
export interface Attempt {
  candidate: Candidate;
  endpoint: EndpointConfig;
}

export interface HealthTracker {
  isHealthy(url: string): boolean;
  success(url: string): void;
  failure(url: string): void;
}

export interface AttemptFailure {
  /** What the client gets when this is the last failure (a stable message of ours, no upstream text). */
  error: ApiError;
  /** Try the next attempt; false when the request itself is at fault. */
  retry: boolean;
  /** Counts against the endpoint's health (connect errors, timeouts, 5xx, streams that die before their first byte). */
  unhealthy: boolean;
  /** The upstream's Retry-After in seconds, on a 429. */
  retryAfterSeconds?: number;
}

export type SendResult<T> = { ok: true; value: T } | { ok: false; failure: AttemptFailure };

export interface Dispatched<T> {
  value: T;
  attempt: Attempt;
  tries: number;
}

/** The client left: nothing to answer. Used as the abort reason of the request's signal. */
export { ClientClosed } from '../../kit/index.js';

export function planAttempts(candidates: Candidate[], health: Pick<HealthTracker, 'isHealthy'>, random: Random): Attempt[] {
  const healthy: Attempt[] = [];
  const unhealthy: Attempt[] = [];
  for (const candidate of candidates) {
    const order = orderEndpoints(candidate.provider.endpoints, health, random);
    for (const endpoint of order.healthy) healthy.push({ candidate, endpoint });
    for (const endpoint of order.unhealthy) unhealthy.push({ candidate, endpoint });
  }
  return [...healthy, ...unhealthy];
}

/**
 * The longest `Retry-After` when not every failure was a rate limit (a timeout, a 5xx, a provider
 * we cannot call): the SDKs sleep exactly that long, and the provider that failed otherwise may
 * answer well before the rate-limited one resets.
 */
export const MIXED_FAILURE_RETRY_AFTER_SECONDS = 5;

/** A provider's Retry-After as the client's: whole seconds in [1, MAX_RETRY_AFTER_SECONDS] (never 0, which invites a retry storm). */
function clientRetryAfter(seconds: number): number {
  return Math.min(Math.max(Math.round(seconds) || 1, 1), MAX_RETRY_AFTER_SECONDS);
}

export async function failover<T>(
  attempts: readonly Attempt[],
  send: (attempt: Attempt) => Promise<SendResult<T>>,
  options: { health: HealthTracker; signal: CancelSignal; onFailure?: (attempt: Attempt, failure: AttemptFailure) => void },
): Promise<Dispatched<T>> {
  if (attempts.length === 0) throw new ApiError(503, 'No endpoint is available for this model');
  let last: AttemptFailure | undefined;
  // The soonest any rate-limited attempt said it would take requests again.
  let soonest = Infinity;
  let allLimited = true;
  let tries = 0;
  for (const attempt of attempts) {
    // The signal's reason says why: the client left (ClientClosed) or the deadline passed (504).
    if (options.signal.aborted) throw options.signal.reason;
    tries++;
    const result = await send(attempt);
    const url = attempt.endpoint.url;
    if (result.ok) {
      options.health.success(url);
      return { value: result.value, attempt, tries };
    }
    last = result.failure;
    if (last.retryAfterSeconds !== undefined) soonest = Math.min(soonest, clientRetryAfter(last.retryAfterSeconds));
    else allLimited = false;
    if (last.unhealthy) options.health.failure(url);
    options.onFailure?.(attempt, last);
    if (!last.retry) throw last.error;
  }
  if (soonest !== Infinity) {
    if (allLimited) throw new ApiError(429, 'All providers for this model are rate limited', { headers: { 'retry-after': String(soonest) } });
    const retryAfter = Math.min(soonest, MIXED_FAILURE_RETRY_AFTER_SECONDS);
    throw new ApiError(429, 'The providers for this model are rate limited or unavailable', { headers: { 'retry-after': String(retryAfter) } });
  }
  throw last!.error;
}
