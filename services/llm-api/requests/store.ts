import type { Knex } from 'knex';
import type { ServedRequest } from '../../kit/index.js';

export interface RequestLogRow extends Omit<ServedRequest, 'usage' | 'ended_at'> {
  id: string | number;
  model: string | null;
  provider_id: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  total_tokens: number | null;
  created_at: Date;
}

export interface RequestLogFilter {
  requestId?: string;
  userId?: string;
  keyId?: string;
}

const TABLE = 'llm_request_log';

/** One multi-row insert per batch. */
export async function insertRequestLogBatch(knex: Knex, batch: ServedRequest[]): Promise<void> {
  if (batch.length === 0) return;
  await knex(TABLE).insert(
    batch.map((r) => ({
      request_id: r.request_id,
      method: r.method,
      path: r.path,
      route: r.route,
      status: r.status,
      duration_ms: r.duration_ms,
      aborted: r.aborted,
      auth_method: r.auth_method,
      user_id: r.user_id,
      api_key_id: r.api_key_id,
      model: r.usage?.model ?? null,
      provider_id: r.usage?.provider ?? null,
      prompt_tokens: r.usage?.prompt_tokens ?? null,
      completion_tokens: r.usage?.completion_tokens ?? null,
      total_tokens: r.usage?.total_tokens ?? null,
      created_at: r.ended_at,
    })),
  );
}

/** Removes rows older than `before`, then all but the newest `maxRows`. Safe to run from several processes. */
export async function pruneRequestLog(knex: Knex, options: { before: Date; maxRows: number }): Promise<number> {
  let removed = await knex(TABLE).where('created_at', '<', options.before).del();
  const boundary = await knex(TABLE).select('id').orderBy('id', 'desc').offset(options.maxRows).limit(1).first();
  if (boundary) removed += await knex(TABLE).where('id', '<=', boundary.id).del();
  return removed;
}

function filtered(knex: Knex, filter: RequestLogFilter) {
  const q = knex(TABLE);
  if (filter.requestId !== undefined) q.where('request_id', filter.requestId);
  if (filter.userId !== undefined) q.where('user_id', filter.userId);
  if (filter.keyId !== undefined) q.where('api_key_id', filter.keyId);
  return q;
}

/** Newest first. */
export async function listRequestLog(knex: Knex, filter: RequestLogFilter, page: { limit: number; offset: number }): Promise<{ rows: RequestLogRow[]; total: number }> {
  const [rows, count] = await Promise.all([
    filtered(knex, filter).select('*').orderBy('id', 'desc').limit(page.limit).offset(page.offset) as Promise<RequestLogRow[]>,
    filtered(knex, filter).count<{ count: string }[]>('* as count').first(),
  ]);
  return { rows, total: Number(count?.count ?? 0) };
}
