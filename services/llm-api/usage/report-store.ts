import type { Knex } from 'knex';

/** Reads of the daily rollup (`llm_usage_daily`); never the raw `llm_usage` rows. */
export const GROUP_COLUMNS = { day: 'day', user: 'user_id', key: 'api_key_id', model: 'model', provider: 'provider_id', project: 'project_id' } as const;
export type GroupBy = keyof typeof GROUP_COLUMNS;

export interface UsageFilter {
  from?: string;
  to?: string;
  userId?: string;
  keyId?: string;
  model?: string;
  providerId?: string;
  projectId?: string;
}

export interface UsageRowRaw {
  day?: string;
  user_id?: string;
  api_key_id?: string;
  model?: string;
  provider_id?: string;
  project_id?: string;
  requests: string | number;
  prompt_tokens: string | number;
  cached_tokens: string | number;
  completion_tokens: string | number;
  reasoning_tokens: string | number;
  cost_micro_usd: string | number;
}

function filtered(knex: Knex, filter: UsageFilter) {
  const q = knex('llm_usage_daily');
  if (filter.from) q.where('day', '>=', filter.from);
  if (filter.to) q.where('day', '<=', filter.to);
  if (filter.userId !== undefined) q.where('user_id', filter.userId);
  if (filter.keyId !== undefined) q.where('api_key_id', filter.keyId);
  if (filter.model !== undefined) q.where('model', filter.model);
  if (filter.providerId !== undefined) q.where('provider_id', filter.providerId);
  if (filter.projectId !== undefined) q.where('project_id', filter.projectId);
  return q;
}

function grouped(knex: Knex, filter: UsageFilter, groupBy: GroupBy[]) {
  const columns = groupBy.map((g) => GROUP_COLUMNS[g]);
  const q = filtered(knex, filter).select(
    ...columns.map((c) => (c === 'day' ? knex.raw("to_char(day, 'YYYY-MM-DD') as day") : c)),
    knex.raw('sum(requests) as requests'),
    knex.raw('sum(prompt_tokens) as prompt_tokens'),
    knex.raw('sum(cached_tokens) as cached_tokens'),
    knex.raw('sum(completion_tokens) as completion_tokens'),
    knex.raw('sum(reasoning_tokens) as reasoning_tokens'),
    knex.raw('sum(cost_micro_usd) as cost_micro_usd'),
  );
  if (columns.length > 0) q.groupBy(columns).orderBy(columns.map((c) => ({ column: c, order: 'asc' })));
  return q;
}

export async function countUsageGroups(knex: Knex, filter: UsageFilter, groupBy: GroupBy[]): Promise<number> {
  if (groupBy.length === 0) return 1;
  const columns = groupBy.map((g) => GROUP_COLUMNS[g]);
  const row = await knex.from(filtered(knex, filter).distinct(columns).as('g')).count<{ count: string }[]>('* as count').first();
  return Number(row?.count ?? 0);
}

export function selectUsage(knex: Knex, filter: UsageFilter, groupBy: GroupBy[], page: { limit: number; offset: number }): Promise<UsageRowRaw[]> {
  return grouped(knex, filter, groupBy).limit(page.limit).offset(page.offset) as unknown as Promise<UsageRowRaw[]>;
}

/**
 * One page of the grouped report after the group `after` (a row of the previous page), in group
 * order: keyset paging, for the export. Paging by offset while the rollup changes repeats groups
 * (a new group sorted before the offset pushes the page's rows down) and skips others; by key,
 * every group that exists when the export starts is read exactly once. The rollup's group columns
 * are never NULL ('' stands for none), so a row comparison orders them as `orderBy` does.
 */
export function selectUsageAfter(knex: Knex, filter: UsageFilter, groupBy: GroupBy[], after: UsageRowRaw | null, limit: number): Promise<UsageRowRaw[]> {
  const q = grouped(knex, filter, groupBy).limit(limit);
  if (after && groupBy.length > 0) {
    const columns = groupBy.map((g) => GROUP_COLUMNS[g]);
    const last = columns.map((c) => String((after as unknown as Record<string, unknown>)[c] ?? ''));
    q.whereRaw(`(${columns.map(() => '??').join(', ')}) > (${columns.map(() => '?').join(', ')})`, [...columns, ...last]);
  }
  return q as unknown as Promise<UsageRowRaw[]>;
}
