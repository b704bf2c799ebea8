import type { Knex } from 'knex';
import { columnArrays, type ServedRequest } from '../../kit/index.js';

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

/**
 * One statement per batch with one bound value per column (kit `columnArrays`): a multi-row insert
 * bound 16 values per row (up to 8 000 per batch), each copied to the PGlite worker and placed by
 * knex's compiler, for rows the process had already built.
 */
const LOG_ROWS = columnArrays<ServedRequest>([
  ['request_id', 'text', (r) => r.request_id],
  ['method', 'text', (r) => r.method],
  ['path', 'text', (r) => r.path],
  ['route', 'text', (r) => r.route],
  ['status', 'integer', (r) => r.status],
  ['duration_ms', 'double precision', (r) => r.duration_ms],
  ['aborted', 'boolean', (r) => r.aborted ?? false],
  ['auth_method', 'text', (r) => r.auth_method],
  ['user_id', 'text', (r) => r.user_id],
  ['api_key_id', 'text', (r) => r.api_key_id],
  ['model', 'text', (r) => r.usage?.model],
  ['provider_id', 'text', (r) => r.usage?.provider],
  ['prompt_tokens', 'integer', (r) => r.usage?.prompt_tokens],
  ['completion_tokens', 'integer', (r) => r.usage?.completion_tokens],
  ['total_tokens', 'integer', (r) => r.usage?.total_tokens],
  ['created_at', 'timestamptz', (r) => r.ended_at],
]);

const INSERT = `insert into ${TABLE} (${LOG_ROWS.names}) select ${LOG_ROWS.names} from ${LOG_ROWS.fromItem}`;

export async function insertRequestLogBatch(knex: Knex, batch: ServedRequest[]): Promise<void> {
  if (batch.length === 0) return;
  await knex.raw(INSERT, LOG_ROWS.bind(batch));
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
