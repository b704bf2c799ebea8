import test from 'ava';
import { createDatabase, kitMigrations, migrateAll, type Database } from '../../services/kit/index.js';
import { busContract, type BusHarness } from './bus-contract.js';
import { pgQueueHarness } from './pg-queue-harness.js';

// The same contract on the embedded default: the PostgreSQL queue on PGlite (in memory), with
// the same migrations as PostgreSQL.
let db: Database;
let harness: BusHarness;
let closeAll: () => Promise<unknown>;

test.before(async () => {
  db = await createDatabase({ dataDir: '.', inMemory: true });
  await migrateAll(db.knex, [kitMigrations]);
  const made = pgQueueHarness(db, { exchange: 'platform.events' });
  harness = made.harness;
  closeAll = made.closeAll;
});

test.after.always(async () => {
  await closeAll?.();
  await db?.close();
});

busContract(test, () => harness);
