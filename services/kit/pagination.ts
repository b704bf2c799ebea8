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
    z.number({ error: 'must be an integer' }).int().min(min).max(max).optional(),
  );

export function parsePage(query: unknown, options: { defaultLimit?: number; maxLimit?: number } = {}): Page {
  const maxLimit = options.maxLimit ?? 100;
  const schema = z.object({ limit: intParam(1, maxLimit), offset: intParam(0, 1_000_000_000) });
  const parsed = parseInput(schema, pick(query, ['limit', 'offset']));
  return { limit: parsed.limit ?? options.defaultLimit ?? 20, offset: parsed.offset ?? 0 };
}

export function listEnvelope<T>(data: T[], totalCount: number, page: Page): ListEnvelope<T> {
  return { object: 'list', data, has_more: page.offset + data.length < totalCount, total_count: totalCount };
}

function pick(query: unknown, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (query && typeof query === 'object') for (const k of keys) out[k] = (query as Record<string, unknown>)[k];
  return out;
}
