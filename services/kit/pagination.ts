import { z } from 'zod';
import { badRequest, type ApiError } from './errors.js';
import { parseInput } from './validation.js';

/** `limit`/`offset` → `{object:"list", data, has_more, total_count}` (SPEC.md section 9). */
export interface Page {
  limit: number;
  offset: number;
}

export interface ListEnvelope<T> {
  object: 'list';
  data: T[];
  has_more: boolean;
  total_count: number;
}

/** A query string's integer: digits only (no `1e1`, no spaces); absent or empty is `undefined`. */
const digits = (v: unknown) => (v === undefined || v === '' ? undefined : typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v);

const integer = (min: number, max: number) =>
  z
    .number({ error: 'must be an integer' })
    .int({ error: 'must be an integer' })
    .min(min, { error: `must be between ${min} and ${max}` })
    .max(max, { error: `must be between ${min} and ${max}` });

const optionalInt = (min: number, max: number) => z.preprocess(digits, integer(min, max).optional());
const defaultedInt = (min: number, max: number, fallback: number) => z.preprocess(digits, integer(min, max).default(fallback));

/**
 * An integer query parameter in [min, max]: absent or empty is `undefined`, or `fallback` when one
 * is given. Every list's `limit` and `offset` use it, so they are parsed and refused alike.
 */
export function intParam(min: number, max: number): ReturnType<typeof optionalInt>;
export function intParam(min: number, max: number, fallback: number): ReturnType<typeof defaultedInt>;
export function intParam(min: number, max: number, fallback?: number) {
  return fallback === undefined ? optionalInt(min, max) : defaultedInt(min, max, fallback);
}

export interface PageOptions {
  defaultLimit?: number;
  maxLimit?: number;
}

/**
 * The `limit`/`offset` query of a list route, to extend with its filters in a route's query schema:
 * `pageQuery().extend({...})`; the handler then calls `pageOf(query)`.
 */
export function pageQuery(options: PageOptions = {}) {
  return z.object({ limit: intParam(1, options.maxLimit ?? 100), offset: intParam(0, 1_000_000_000) });
}

export function pageOf(parsed: { limit?: number; offset?: number }, options: PageOptions = {}): Page {
  return { limit: parsed.limit ?? options.defaultLimit ?? 20, offset: parsed.offset ?? 0 };
}

export function parsePage(query: unknown, options: PageOptions = {}): Page {
  return pageOf(parseInput(pageQuery(options), pick(query, ['limit', 'offset'])), options);
}

/** The list envelope's schema around `item` (for response schemas and the OpenAPI document). */
export function listOf<T extends z.ZodType>(item: T) {
  return z.object({ object: z.literal('list'), data: z.array(item), has_more: z.boolean(), total_count: z.number().int() });
}

export function listEnvelope<T>(data: T[], totalCount: number, page: Page): ListEnvelope<T> {
  return { object: 'list', data, has_more: page.offset + data.length < totalCount, total_count: totalCount };
}

function pick(query: unknown, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (query && typeof query === 'object') for (const k of keys) out[k] = (query as Record<string, unknown>)[k];
  return out;
}

/**
 * Cursor lists (the OpenAI-style `limit`/`order`/`after` → `{object:"list", data, first_id, last_id,
 * has_more}` the SDKs auto-paginate with `after = last_id`): conversation items, response input items.
 */
export interface CursorList<T> {
  object: 'list';
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

export interface CursorOptions extends PageOptions {
  /** The longest id `after` accepts (default 64). */
  maxIdLength?: number;
}

/** The `limit`/`order`/`after` query of a cursor list, to extend with the list's own parameters. */
export function cursorQuery(options: CursorOptions = {}) {
  return z.object({
    limit: intParam(1, options.maxLimit ?? 100, options.defaultLimit ?? 20),
    order: z.enum(['asc', 'desc'], { error: "must be 'asc' or 'desc'" }).default('desc'),
    after: z.string().min(1).max(options.maxIdLength ?? 64).optional(),
  });
}

/** The envelope of one page of a cursor list: `first_id`/`last_id` are those of `data` (null when empty). */
export function cursorEnvelope<T extends { id: string }>(data: T[], hasMore: boolean): CursorList<T> {
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: hasMore };
}

/**
 * The one rule of every cursor list for an `after` (or `before`) id: `locate` turns it into where
 * the page starts (or stops). A list that can still place an item removed since it was answered
 * (its position survives somewhere) returns that place, so a client paging while items are deleted
 * neither restarts nor skips; an id the list cannot place (never in it, another owner's, erased
 * without a trace) is a 400 naming the parameter, never an empty page or a silent restart from the
 * first item, which a client looping on `last_id` could not tell from a real answer.
 */
export async function resolveCursor<P>(
  param: 'after' | 'before',
  id: string | undefined,
  locate: (id: string) => P | undefined | Promise<P | undefined>,
): Promise<P | undefined> {
  if (id === undefined) return undefined;
  const at = await locate(id);
  if (at === undefined) throw cursorNotFound(param, id);
  return at;
}

/** The refusal of a cursor a list cannot place (see `resolveCursor`); lists with a synchronous lookup throw it themselves. */
export function cursorNotFound(param: 'after' | 'before', id: string): ApiError {
  return badRequest(`Invalid value for '${param}': '${id}' is not an item of this list (any more); list again without '${param}'.`, param);
}
