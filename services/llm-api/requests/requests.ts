import type { Knex } from 'knex';
import { z } from 'zod';
import { createBatchWriter, listEnvelope, type Clock, type Logger, type Page, type ServedRequest } from '../../kit/index.js';
import type { RequestLogEntry } from './entry.js';
import { insertRequestLogBatch, listRequestLog, pruneRequestLog, type RequestLogFilter, type RequestLogRow } from './store.js';

/**
 * The recent-requests log: every request llm-api served (probes excluded), with who made it and,
 * for chat, model, provider and tokens. Rows are queued in memory and written in batches; the log
 * is pruned to its retention and row cap every minute and whenever a tenth of the cap was written,
 * so it stays bounded (at most about 10% over the cap between two prunes) whatever the load.
 */
export interface RequestLogDeps {
  knex: Knex;
}

/** Prune at least this often, and whenever a tenth of the row cap was written since the last prune. */
const PRUNE_EVERY_MS = 60_000;

export function createRequestLogWriter(deps: { knex: Knex; clock: Clock; logger: Logger; retentionHours: number; maxRows: number; flushMs: number }) {
  // Pruning is two indexed deletes; doing it per batch would cost more than the inserts under load.
  let writtenSincePrune = 0;
  let lastPrune = deps.clock.now();
  return createBatchWriter<ServedRequest>({
    name: 'request log',
    write: async (batch) => {
      await insertRequestLogBatch(deps.knex, batch);
      writtenSincePrune += batch.length;
    },
    afterWrite: async () => {
      const now = deps.clock.now();
      if (writtenSincePrune < Math.max(1, deps.maxRows / 10) && now - lastPrune < PRUNE_EVERY_MS) return;
      writtenSincePrune = 0;
      lastPrune = now;
      await pruneRequestLog(deps.knex, { before: new Date(now - deps.retentionHours * 3_600_000), maxRows: deps.maxRows });
    },
    flushMs: deps.flushMs,
    batchSize: 500,
    maxQueued: 50_000,
    logger: deps.logger,
  });
}

export const requestLogEntrySchema = z.object({
  object: z.literal('request'),
  id: z.string().describe('the request id (X-Request-ID)'),
  method: z.string(),
  path: z.string(),
  route: z.string().nullable().describe('the route template that matched; null when none did'),
  status: z.number().int(),
  duration_ms: z.number(),
  aborted: z.boolean().describe('the client left before the answer ended'),
  auth_method: z.string().nullable(),
  user_id: z.string().nullable(),
  key_id: z.string().nullable(),
  model: z.string().nullable(),
  provider_id: z.string().nullable(),
  prompt_tokens: z.number().int().nullable(),
  completion_tokens: z.number().int().nullable(),
  total_tokens: z.number().int().nullable(),
  created_at: z.number().int().describe('when the request ended (Unix seconds)'),
}) satisfies z.ZodType<RequestLogEntry>;

function present(row: RequestLogRow): RequestLogEntry {
  const count = (v: number | string | null) => (v === null ? null : Number(v));
  return {
    object: 'request',
    id: row.request_id,
    method: row.method,
    path: row.path,
    route: row.route,
    status: row.status,
    duration_ms: Number(row.duration_ms),
    aborted: row.aborted,
    auth_method: row.auth_method,
    user_id: row.user_id,
    key_id: row.api_key_id,
    model: row.model,
    provider_id: row.provider_id,
    prompt_tokens: count(row.prompt_tokens),
    completion_tokens: count(row.completion_tokens),
    total_tokens: count(row.total_tokens),
    created_at: Math.floor(new Date(row.created_at).getTime() / 1000),
  };
}

/** Newest first, filtered by request id, user or key. */
export async function listRecentRequests(deps: RequestLogDeps, filter: RequestLogFilter, page: Page) {
  const { rows, total } = await listRequestLog(deps.knex, filter, page);
  return listEnvelope(rows.map(present), total, page);
}
