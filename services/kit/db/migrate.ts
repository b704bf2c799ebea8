import type { Knex } from 'knex';

/**
 * Migrations are modules, not files discovered at run time, so the same list runs from `tsx`,
 * from `dist/` and from a bundle. Each owner (the kit, each service) keeps its own history table
 * (`migrations_<owner>`), so a service started alone migrates only what it owns plus the kit.
 */
export interface Migration {
  name: string;
  up(knex: Knex): Promise<void>;
  down?(knex: Knex): Promise<void>;
}

export interface MigrationSet {
  owner: string;
  migrations: Migration[];
}

/**
 * Runs the sets in order (the kit's first); a set listed by several services runs once.
 *
 * Copies of a service started together (two replicas, a cluster) would otherwise race in knex's
 * own bookkeeping: both find no history table and both create it (a duplicate-key error on
 * `pg_type`), or both insert the lock row, which leaves two rows and a migration lock no process
 * can ever take again. So the whole run holds a transaction-scoped advisory lock keyed on the
 * schema: the second copy waits, then finds nothing left to apply. Deployments in other schemas
 * of the same database do not wait for one another.
 */
export async function migrateAll(knex: Knex, sets: MigrationSet[]): Promise<string[]> {
  const done = new Map<string, MigrationSet>();
  const unique: MigrationSet[] = [];
  for (const set of sets) {
    const seen = done.get(set.owner);
    if (seen === set) continue;
    if (seen) throw new Error(`two different migration sets claim the owner ${set.owner}`);
    done.set(set.owner, set);
    unique.push(set);
  }
  return knex.transaction(async (trx) => {
    await trx.raw("select pg_advisory_xact_lock(hashtext('migrations:' || current_schema()))");
    const applied: string[] = [];
    for (const set of unique) applied.push(...(await migrateLatest(trx, set)));
    return applied;
  });
}

async function migrateLatest(trx: Knex.Transaction, set: MigrationSet): Promise<string[]> {
  const sorted = [...set.migrations].sort((a, b) => a.name.localeCompare(b.name));
  const names = new Set<string>();
  for (const m of sorted) {
    if (names.has(m.name)) throw new Error(`duplicate migration name ${m.name}`);
    names.add(m.name);
  }
  const source: Knex.MigrationSource<Migration> = {
    getMigrations: async () => sorted,
    getMigrationName: (m) => m.name,
    getMigration: async (m) => ({ up: m.up, down: m.down ?? (async () => {}) }),
  };
  const [, applied] = await trx.migrate.latest({ migrationSource: source, tableName: `migrations_${set.owner}` });
  return applied as string[];
}
