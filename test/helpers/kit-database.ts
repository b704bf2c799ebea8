import type { TestFn } from 'ava';
import { createDatabase, kitMigrations, migrateAll, type Database } from '../../services/kit/index.js';

/**
 * The embedded database in memory with the kit's tables (the queue's, the outbox's), opened before
 * the file's tests and closed after them. The returned function gives it to a test.
 */
export function inMemoryKitDatabase(test: TestFn): () => Database {
  let db: Database | undefined;
  test.before(async () => {
    db = await createDatabase({ dataDir: '.', inMemory: true });
    await migrateAll(db.knex, [kitMigrations]);
  });
  test.after.always(async () => {
    await db?.close();
  });
  return () => db!;
}
