import type { Knex } from 'knex';
import type { Logger } from '../logger.js';
import { runEvery, type Periodic } from '../periodic.js';

/**
 * The embedded database's autovacuum. PGlite runs PostgreSQL in single-user mode, where no
 * background process runs (`max_worker_processes` is 0), so nothing ever vacuums or analyzes.
 * Tables that churn — the embedded queue's jobs, the outbox, the recent-requests log pruned to its
 * cap — then grow without bound: the space of deleted rows is never reused (about 1 MiB more per
 * 10 000 rows queued and removed), and every index scan walks their dead entries.
 *
 * This does what autovacuum does, with its default thresholds: every period, one read of the table
 * statistics, then `VACUUM (ANALYZE)` of each table whose dead rows exceed 50 + 20 % of its live
 * rows, or `ANALYZE` alone of one with more than 50 + 10 % of its rows changed since the last.
 * PostgreSQL proper has autovacuum; only the PGlite driver runs this.
 */
export interface VacuumPass {
  vacuumed: string[];
  analyzed: string[];
}

interface TableStats {
  schemaname: string;
  relname: string;
  n_live_tup: number | string;
  n_dead_tup: number | string;
  n_mod_since_analyze: number | string;
}

export async function vacuumWhereDue(knex: Knex): Promise<VacuumPass> {
  // Statistics reach the shared view at most once a second, when the session is idle; this makes
  // the next statement publish what this session counted, so the read below is current.
  await knex.raw('select pg_stat_force_next_flush()');
  const result = await knex.raw('select schemaname, relname, n_live_tup, n_dead_tup, n_mod_since_analyze from pg_stat_user_tables');
  const pass: VacuumPass = { vacuumed: [], analyzed: [] };
  for (const table of result.rows as TableStats[]) {
    const live = Number(table.n_live_tup);
    const name = `${table.schemaname}.${table.relname}`;
    if (Number(table.n_dead_tup) > 50 + 0.2 * live) {
      await knex.raw('vacuum (analyze) ??', [name]);
      pass.vacuumed.push(name);
    } else if (Number(table.n_mod_since_analyze) > 50 + 0.1 * live) {
      await knex.raw('analyze ??', [name]);
      pass.analyzed.push(name);
    }
  }
  return pass;
}

/** Runs `vacuumWhereDue` every `everyMs` until stopped; a failed pass is logged and the next one runs. */
export function startEmbeddedVacuum(knex: Knex, options: { everyMs: number; logger?: Logger }): Periodic {
  return runEvery(
    options.everyMs,
    () => vacuumWhereDue(knex),
    (error) => options.logger?.warn({ err: error.message }, 'embedded database: vacuum pass failed'),
  );
}
