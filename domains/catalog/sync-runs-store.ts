import type { Knex } from 'knex';

/**
 * On-demand synchronisation runs (`llm_provider_sync_runs`): one row per request, written by llm-api
 * when it asks for a run and by whoever runs it (the provider-sync worker, or llm-api itself for the
 * synchronous endpoint). Status goes queued → running → succeeded | failed; a run the worker will
 * retry goes back to queued with the error that interrupted it.
 */
export type SyncRunStatus = 'queued' | 'running' | 'succeeded' | 'failed';

export interface SyncRunCounts {
  providers_synced: number;
  providers_failed: number;
  added: number;
  updated: number;
  deactivated: number;
}

export interface SyncRunRow extends SyncRunCounts {
  id: string;
  /** The one provider asked for; null = every active provider. */
  provider_id: string | null;
  status: SyncRunStatus;
  error: string | null;
  /** Per provider that failed: `{provider_id, error}`. */
  failures: Array<{ provider_id: string; error: string }>;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
}

const RUNS = 'llm_provider_sync_runs';
const FINISHED: SyncRunStatus[] = ['succeeded', 'failed'];
const ZERO: SyncRunCounts = { providers_synced: 0, providers_failed: 0, added: 0, updated: 0, deactivated: 0 };

export function createSyncRunsStore(knex: Knex) {
  return {
    async insert(row: { id: string; provider_id: string | null; status: SyncRunStatus; created_at: number }): Promise<SyncRunRow> {
      const [created] = await knex(RUNS).insert({ ...row, ...ZERO, failures: JSON.stringify([]) }).returning('*');
      return created;
    },
    async byId(id: string): Promise<SyncRunRow | undefined> {
      return knex(RUNS).where({ id }).first();
    },
    /** Newest first (ties broken by id so pages do not overlap), with the total for the list envelope. */
    async list(page: { limit: number; offset: number }): Promise<{ rows: SyncRunRow[]; total: number }> {
      const [rows, [{ count }]] = await Promise.all([
        knex(RUNS).orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).limit(page.limit).offset(page.offset),
        knex(RUNS).count<{ count: string | number }[]>({ count: '*' }),
      ]);
      return { rows, total: Number(count) };
    },
    /** Claims a queued run; false when it already finished (a redelivered request is not run twice). */
    async start(id: string, nowSec: number): Promise<boolean> {
      const updated = await knex(RUNS).where({ id }).whereNotIn('status', FINISHED).update({ status: 'running', started_at: nowSec });
      return updated > 0;
    },
    async finish(id: string, result: SyncRunCounts & { failures: SyncRunRow['failures']; error: string | null }, nowSec: number): Promise<void> {
      const { failures, ...rest } = result;
      await knex(RUNS)
        .where({ id })
        .update({ ...rest, failures: JSON.stringify(failures), status: result.error ? 'failed' : 'succeeded', finished_at: nowSec });
    },
    /** The run was interrupted and will be retried. */
    async requeue(id: string, error: string): Promise<void> {
      await knex(RUNS).where({ id }).whereNotIn('status', FINISHED).update({ status: 'queued', error });
    },
  };
}

export type SyncRunsStore = ReturnType<typeof createSyncRunsStore>;
