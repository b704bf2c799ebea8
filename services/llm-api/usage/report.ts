import type { Knex } from 'knex';
import { z } from 'zod';
import { ApiError, listEnvelope, pageQuery, pageOf, type ListEnvelope, type Principal } from '../../kit/index.js';
import { countUsageGroups, GROUP_COLUMNS, selectUsage, selectUsageAfter, type GroupBy, type UsageFilter, type UsageRowRaw } from './report-store.js';

/**
 * Usage and cost reports from the daily rollup: filters by UTC day range and dimension, grouped by
 * any of day, user, key, model, provider and project. `GET /v1/usage` is the caller's own (user_id forced);
 * `GET /v1/admin/usage` is everyone's. Cost is in micro-USD as priced when the request was made.
 */
export interface UsageReportDeps {
  knex: Knex;
}

/** A UTC day that exists (`2026-02-30` does not): the database would refuse it with a 500. */
const day = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a UTC day, YYYY-MM-DD')
  .refine((v) => {
    const parsed = new Date(`${v}T00:00:00Z`);
    return v >= '0001-01-01' && !Number.isNaN(parsed.getTime()) && parsed.toISOString().startsWith(v);
  }, 'must be a UTC day that exists, YYYY-MM-DD');
const groupBy = z
  .string()
  .optional()
  .transform((v, ctx) => {
    const parts = (v ?? '').split(',').map((s) => s.trim()).filter(Boolean);
    for (const part of parts) {
      // Own keys only: `in` also found the prototype's (`constructor`, `toString`), which reached the query as a 500.
      if (!Object.hasOwn(GROUP_COLUMNS, part)) {
        ctx.addIssue({ code: 'custom', message: `must be a comma-separated list of ${Object.keys(GROUP_COLUMNS).join(', ')}; '${part}' is not one` });
        return z.NEVER;
      }
    }
    return [...new Set(parts)] as GroupBy[];
  });

/**
 * A filter's value: never empty. The rollup stores '' for "none", so `key_id=` (a script's empty
 * variable) matched every request made without a key and answered that usage as if asked for it.
 */
const filterValue = (max: number) => z.string().min(1).max(max).optional();

export const usageQuery = pageQuery({ maxLimit: 1000 }).extend({
  from: day.optional(),
  to: day.optional(),
  user_id: filterValue(64),
  key_id: filterValue(64),
  model: filterValue(300),
  provider_id: filterValue(64),
  project_id: filterValue(64),
  group_by: groupBy,
});
export type UsageQuery = z.infer<typeof usageQuery>;

export const usageRowSchema = z.object({
  object: z.literal('usage.row'),
  day: z.string().optional(),
  user_id: z.string().nullable().optional(),
  key_id: z.string().nullable().optional(),
  model: z.string().optional(),
  provider_id: z.string().nullable().optional(),
  project_id: z.string().nullable().optional(),
  requests: z.number().int(),
  prompt_tokens: z.number().int(),
  cached_tokens: z.number().int().describe('of the prompt tokens, those the provider served from its cache (priced at the cached rate when the model has one)'),
  completion_tokens: z.number().int(),
  reasoning_tokens: z.number().int(),
  total_tokens: z.number().int(),
  cost_micro_usd: z.number().int(),
});
export type UsageRow = z.infer<typeof usageRowSchema>;

/** The query's filters; a range that ends before it starts is a 400 naming `to` (not an empty report). */
export function filterOf(query: UsageQuery): UsageFilter {
  if (query.from !== undefined && query.to !== undefined && query.to < query.from) {
    throw new ApiError(400, `Invalid value for 'to': ${query.to} is before 'from' (${query.from}); both days are included, so a single day is from=to`, { param: 'to' });
  }
  return {
    from: query.from,
    to: query.to,
    userId: query.user_id,
    keyId: query.key_id,
    model: query.model,
    providerId: query.provider_id,
    projectId: query.project_id,
  };
}

const orNull = (v: string | undefined) => (v === '' ? null : v);

export function toUsageRow(raw: UsageRowRaw, groups: GroupBy[]): UsageRow {
  const prompt = Number(raw.prompt_tokens ?? 0);
  const completion = Number(raw.completion_tokens ?? 0);
  const row: UsageRow = {
    object: 'usage.row',
    requests: Number(raw.requests ?? 0),
    prompt_tokens: prompt,
    cached_tokens: Number(raw.cached_tokens ?? 0),
    completion_tokens: completion,
    reasoning_tokens: Number(raw.reasoning_tokens ?? 0),
    total_tokens: prompt + completion,
    cost_micro_usd: Number(raw.cost_micro_usd ?? 0),
  };
  if (groups.includes('day')) row.day = raw.day;
  if (groups.includes('user')) row.user_id = orNull(raw.user_id);
  if (groups.includes('key')) row.key_id = orNull(raw.api_key_id);
  if (groups.includes('model')) row.model = raw.model;
  if (groups.includes('provider')) row.provider_id = orNull(raw.provider_id);
  if (groups.includes('project')) row.project_id = orNull(raw.project_id);
  return row;
}

export async function usageReport(deps: UsageReportDeps, filter: UsageFilter, groups: GroupBy[], query: { limit?: number; offset?: number }): Promise<ListEnvelope<UsageRow>> {
  const page = pageOf(query, { defaultLimit: 100 });
  const [total, rows] = await Promise.all([countUsageGroups(deps.knex, filter, groups), selectUsage(deps.knex, filter, groups, page)]);
  return listEnvelope(rows.map((r) => toUsageRow(r, groups)), total, page);
}

/** The caller's own usage: whatever user_id the query names, it is the caller's. */
export function ownUsage(deps: UsageReportDeps, principal: Principal, query: UsageQuery) {
  return usageReport(deps, { ...filterOf(query), userId: principal.userId }, query.group_by, query);
}

const CSV_COLUMNS = ['day', 'user_id', 'key_id', 'model', 'provider_id', 'project_id', 'requests', 'prompt_tokens', 'completion_tokens', 'reasoning_tokens', 'total_tokens', 'cost_micro_usd', 'cached_tokens'] as const;

function csvCell(value: unknown): string {
  if (value === undefined || value === null) return '';
  const text = String(value);
  // Quote always-risky cells, and neutralise spreadsheet formulas.
  const safe = /^[=+\-@\t\r]/.test(text) && typeof value === 'string' ? `'${text}` : text;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** The report as CSV lines, read from the rollup a page at a time (the export never holds it all). */
export async function* usageCsv(deps: UsageReportDeps, filter: UsageFilter, groups: GroupBy[]): AsyncGenerator<string> {
  const groupOfColumn: Record<string, GroupBy> = { day: 'day', user_id: 'user', key_id: 'key', model: 'model', provider_id: 'provider', project_id: 'project' };
  const columns = CSV_COLUMNS.filter((c) => !(c in groupOfColumn) || groups.includes(groupOfColumn[c]!));
  const pageSize = 1000;
  // By key, not offset: while traffic goes on, new groups must not shift the pages (see selectUsageAfter).
  // The first page is read before the header line goes out: a database that cannot answer is then
  // an error status, not a 200 whose CSV (a header, perhaps) is cut off.
  let rows: UsageRowRaw[] = await selectUsageAfter(deps.knex, filter, groups, null, pageSize);
  yield `${columns.join(',')}\n`;
  for (;;) {
    for (const raw of rows) {
      const row = toUsageRow(raw, groups) as Record<string, unknown>;
      yield `${columns.map((c) => csvCell(row[c])).join(',')}\n`;
    }
    if (rows.length < pageSize || groups.length === 0) return;
    rows = await selectUsageAfter(deps.knex, filter, groups, rows.at(-1)!, pageSize);
  }
}
