import { z } from 'zod';
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

const intParam = (min: number, max: number) =>
  z.preprocess(
    (v) => (v === undefined || v === '' ? undefined : typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v),
    z
      .number({ error: 'must be an integer' })
      .int({ error: 'must be an integer' })
      .min(min, { error: `must be between ${min} and ${max}` })
      .max(max, { error: `must be between ${min} and ${max}` })
      .optional(),
  );

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
