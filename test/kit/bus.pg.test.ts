import test from 'ava';
import knexFactory from 'knex';
import { createDatabase, kitMigrations, migrateAll, type Database } from '../../services/kit/index.js';
import { dropSchema, TEST_DATABASE_URL, uniqueName } from '../helpers/env.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { busContract, type BusHarness } from './bus-contract.js';
import { pgQueueHarness } from './pg-queue-harness.js';

// The bus contract for the PostgreSQL-backed queue on the real PostgreSQL; the outage is a cut
// TCP proxy between the bus and the database.
const schema = uniqueName('buspg');
let db: Database;
let proxy: FaultProxy;
let faulty: knexFactory.Knex | undefined;
let harness: BusHarness;
let closeAll: () => Promise<unknown>;

test.before(async () => {
  db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', schema });
  await migrateAll(db.knex, [kitMigrations]);
  proxy = await startFaultProxy({ host: '127.0.0.1', port: 5432 });
  const url = new URL(TEST_DATABASE_URL);
  url.port = String(proxy.port);
  const made = pgQueueHarness(db, {
    exchange: `${schema}.events`,
    faultyKnex: () =>
      (faulty = knexFactory({
        client: 'pg',
        connection: url.toString(),
        searchPath: [schema],
        pool: { min: 0, max: 2 },
        acquireConnectionTimeout: 2000,
      })),
    onDown: () => proxy.cut(),
    onUp: () => proxy.resume(),
  });
  harness = made.harness;
  closeAll = made.closeAll;
});

test.after.always(async () => {
  await closeAll?.();
  await faulty?.destroy();
  await proxy?.close();
  await db?.close();
  await dropSchema(schema);
});

busContract(test, () => harness);
