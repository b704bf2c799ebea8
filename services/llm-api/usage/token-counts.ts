import type { Usage } from '../chat/types.js';

/**
 * Token counts as a provider reports them, made safe to add up, price and store: a count is a
 * non-negative integer (at most `MAX_TOKEN_COUNT`, a number or a string of digits) or it is not a
 * count. Providers send what they like (12.5, -1, "ten", 1e300); every path where usage enters
 * the gateway (a JSON answer, a stream's usage chunk, the usage meter) reads it through
 * `cleanUsage`, so an odd value becomes 0 (or, for the optional reasoning count, absent), is
 * logged (with the request's id) through the log it is given, and never reaches the integer
 * columns of the usage table, where one such row failed the whole batch insert.
 */

/**
 * The largest count taken: the raw usage columns are 32-bit integers, and a prompt and a
 * completion count of this size still add up to a total that fits one. No answer comes near it.
 */
export const MAX_TOKEN_COUNT = 1_000_000_000;

/**
 * A token count, or undefined when the value is not one (absent, fractional, negative, too large,
 * not a number). A string of decimal digits ("10") is read as its number, as the JSON path always
 * did: some providers quote their counts, and that is no reason to lose them.
 */
export function tokenCount(value: unknown): number | undefined {
  const n = typeof value === 'string' && /^[0-9]{1,10}$/.test(value) ? Number(value) : value;
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= MAX_TOKEN_COUNT ? n : undefined;
}

/** Usage whose counts are numbers (the chat-completion `usage` object, as the chat path types it). */
export type CleanUsage = Usage;

/**
 * Where a count that is not one is reported: the chat path's logger itself, with the request's id
 * passed alongside (no function made per request to carry it).
 */
export interface InvalidCountLog {
  error(fields: object, message: string): void;
}

/** Logs a field whose value was not a token count, and (the start of) the value it had. */
function reportInvalid(log: InvalidCountLog | undefined, requestId: string | undefined, field: string, value: unknown): void {
  log?.error({ request_id: requestId, field, value: String(value).slice(0, 40) }, 'the provider reported a token count that is not a non-negative integer; counted as 0');
}

/**
 * Sets the counts of `usage` in place (the same object goes on to the client): prompt and
 * completion counts become 0 when invalid, the reasoning count is removed when invalid, and the
 * total is always their sum. Other members pass through untouched. Idempotent. Each invalid count
 * is logged to `log` with `requestId`.
 */
export function cleanUsage(usage: Record<string, unknown>, log?: InvalidCountLog, requestId?: string): CleanUsage {
  for (const field of ['prompt_tokens', 'completion_tokens'] as const) {
    const value = usage[field];
    const count = tokenCount(value);
    if (count === undefined && value !== undefined && value !== null) reportInvalid(log, requestId, field, value);
    usage[field] = count ?? 0;
  }
  const details = usage.completion_tokens_details;
  if (typeof details === 'object' && details !== null && !Array.isArray(details) && 'reasoning_tokens' in details) {
    const value = (details as Record<string, unknown>).reasoning_tokens;
    const count = tokenCount(value);
    if (count !== undefined) (details as Record<string, unknown>).reasoning_tokens = count;
    else {
      if (value !== undefined && value !== null) reportInvalid(log, requestId, 'completion_tokens_details.reasoning_tokens', value);
      delete (details as Record<string, unknown>).reasoning_tokens;
    }
  }
  usage.total_tokens = (usage.prompt_tokens as number) + (usage.completion_tokens as number);
  return usage as CleanUsage;
}

/**
 * A copy of `usage` that `cleanUsage` may change without touching the original: its own object and
 * its own `completion_tokens_details` (the one nested member it writes). Cheaper than a deep clone
 * on every stream's usage chunk.
 */
export function usageCopy(usage: Record<string, unknown>): Record<string, unknown> {
  const copy = { ...usage };
  const details = copy.completion_tokens_details;
  if (typeof details === 'object' && details !== null && !Array.isArray(details)) copy.completion_tokens_details = { ...details };
  return copy;
}
