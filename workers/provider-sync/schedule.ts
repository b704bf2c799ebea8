import type { Knex } from 'knex';
import type { Migration, MigrationSet } from '../../services/kit/index.js';

/**
 * The scheduled pass is the platform's, not each process's: every provider-sync process keeps its
 * timer, and at each fire claims the pass with a compare-and-set on when the last one started, so
 * one process syncs per LLM_PROVIDER_SYNC_INTERVAL_MS however many run.
 */
const TABLE = 'llm_provider_sync_schedule';

const scheduleTable: Migration = {
  name: '20261207_5100_provider_sync_schedule',
  async up(knex) {
    await knex.schema.createTable(TABLE, (t) => {
      t.string('name', 64).primary();
      t.bigInteger('last_started_at').notNullable(); // ms
    });
  },
  async down(knex) {
    await knex.schema.dropTable(TABLE);
  },
};

/** The worker's own history (`migrations_provider_sync`): whichever process starts first creates it. */
export const providerSyncMigrations: MigrationSet = { owner: 'provider_sync', migrations: [scheduleTable] };

export function createSyncScheduleStore(knex: Knex) {
  return {
    /**
     * True when no pass started in the `intervalMs` before `nowMs` (this caller's pass is then
     * recorded). A pass recorded more than an interval after `nowMs` says the clock was set back
     * since (or the process that recorded it runs that far ahead): it is claimed too, rather than
     * every process skipping its passes until the clock catches up with it.
     */
    async claim(name: string, nowMs: number, intervalMs: number): Promise<boolean> {
      const result = await knex.raw(
        `insert into ${TABLE} (name, last_started_at) values (?, ?)
           on conflict (name) do update set last_started_at = excluded.last_started_at
            where ${TABLE}.last_started_at <= ? or ${TABLE}.last_started_at > ?
         returning name`,
        [name, nowMs, nowMs - intervalMs, nowMs + intervalMs],
      );
      return (result.rows ?? []).length > 0;
    },
  };
}
