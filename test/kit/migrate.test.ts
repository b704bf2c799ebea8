import test from 'ava';
import { createDatabase, kitMigrations, migrateAll, type MigrationSet } from '../../services/kit/index.js';
import { dropSchema, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';

// Migration histories are kept per owner; a set that several services list runs once.
const schema = uniqueName('migrate');
test.after.always(() => dropSchema(schema));

test('each owner keeps its own history; a shared set runs once; two sets may not claim one owner', async (t) => {
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema });
  t.teardown(() => db.close());
  let runs = 0;
  const shared: MigrationSet = {
    owner: 'shared_part',
    migrations: [{ name: '20261122_9000_shared_table', up: async (knex) => void (runs++, await knex.schema.createTable('shared_table', (tb) => tb.string('id').primary())) }],
  };
  const service: MigrationSet = {
    owner: 'some_service',
    migrations: [{ name: '20261122_9001_service_table', up: async (knex) => void (await knex.schema.createTable('service_table', (tb) => tb.string('id').primary())) }],
  };
  await migrateAll(db.knex, [kitMigrations, service, shared, shared]);
  await migrateAll(db.knex, [kitMigrations, shared]); // a second process (a worker alone) finds it applied
  t.is(runs, 1);
  const histories = await db.knex.raw("select table_name from information_schema.tables where table_schema = ? and table_name like 'migrations\\_%' and table_name not like '%\\_lock' order by 1", [schema]);
  t.deepEqual(histories.rows.map((r: { table_name: string }) => r.table_name), ['migrations_kit', 'migrations_shared_part', 'migrations_some_service']);
  const impostor: MigrationSet = { owner: 'shared_part', migrations: [] };
  await t.throwsAsync(migrateAll(db.knex, [shared, impostor]), { message: /two different migration sets claim the owner shared_part/ });
});

test('copies started together migrate once: no duplicate history table, one lock row, every copy starts', async (t) => {
  const own = uniqueName('migrate_race');
  t.teardown(() => dropSchema(own));
  const copies = await Promise.all(Array.from({ length: 4 }, () => createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema: own, poolMax: 2 })));
  t.teardown(() => Promise.all(copies.map((db) => db.close())));
  let runs = 0;
  const set: MigrationSet = {
    owner: 'raced_part',
    migrations: [{ name: '20261207_9002_raced_table', up: async (knex) => void (runs++, await knex.schema.createTable('raced_table', (tb) => tb.string('id').primary())) }],
  };
  const applied = await Promise.all(copies.map((db) => migrateAll(db.knex, [kitMigrations, set])));
  t.is(runs, 1);
  t.is(applied.filter((names) => names.includes('20261207_9002_raced_table')).length, 1);
  const locks = await copies[0].knex('migrations_raced_part_lock').select('is_locked');
  t.deepEqual(locks, [{ is_locked: 0 }]);
  // A later start takes the lock and finds nothing to do.
  t.deepEqual(await migrateAll(copies[1].knex, [kitMigrations, set]), []);
});
