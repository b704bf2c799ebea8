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

export async function migrateLatest(knex: Knex, set: MigrationSet): Promise<string[]> {
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
  const [, applied] = await knex.migrate.latest({ migrationSource: source, tableName: `migrations_${set.owner}` });
  return applied as string[];
}

/** Runs the sets in order (the kit's first); a set listed by several services runs once. */
export async function migrateAll(knex: Knex, sets: MigrationSet[]): Promise<void> {
  const done = new Map<string, MigrationSet>();
  for (const set of sets) {
    const seen = done.get(set.owner);
    if (seen === set) continue;
    if (seen) throw new Error(`two different migration sets claim the owner ${set.owner}`);
    done.set(set.owner, set);
    await migrateLatest(knex, set);
  }
}
