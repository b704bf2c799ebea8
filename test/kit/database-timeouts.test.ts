import test from 'ava';
import { createDatabase, MAX_TIMER_MS } from '../../services/kit/index.js';
import { TEST_DATABASE_URL } from '../helpers/env.js';

/**
 * DATABASE_CONNECT_TIMEOUT_MS (createDatabase's `connectTimeoutMs`) bounds every wait for a
 * PostgreSQL connection: pg's connect, the pool's own wait for a connection it is opening (tarn's
 * createTimeoutMillis, which left at its 30 s default would end a longer start wait after 30 s) and
 * a wait for a free pooled connection. Read from the pool knex built, then used against the real
 * PostgreSQL so the options are ones the pool accepts.
 */
test('createDatabase: the pool opens, and waits for, a connection for as long as connectTimeoutMs, above the pool default of 30 s too', async (t) => {
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', connectTimeoutMs: 600_000 });
  t.teardown(() => db.close());
  const client = db.knex.client as unknown as { pool: { createTimeoutMillis: number; acquireTimeoutMillis: number }; connectionSettings: { connectionTimeoutMillis: number } };
  t.is(client.pool.createTimeoutMillis, 600_000);
  t.is(client.pool.acquireTimeoutMillis, 600_000);
  t.is(client.connectionSettings.connectionTimeoutMillis, 600_000);
  t.deepEqual((await db.knex.raw('select 1 as one')).rows, [{ one: 1 }]);
});

test('createDatabase: a short connectTimeoutMs bounds the pool’s wait for a new connection the same way', async (t) => {
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', connectTimeoutMs: 1500 });
  t.teardown(() => db.close());
  const client = db.knex.client as unknown as { pool: { createTimeoutMillis: number; acquireTimeoutMillis: number } };
  t.is(client.pool.createTimeoutMillis, 1500);
  t.is(client.pool.acquireTimeoutMillis, 1500);
  await t.notThrowsAsync(db.ping());
});

test('createDatabase: the longest DATABASE_QUERY_TIMEOUT_MS the settings take still lets queries answer (the client bound stays a valid timer)', async (t) => {
  // The client's bound is the server's plus a grace; past a Node timer's longest delay the timer
  // fired at once, and every query failed with "Query read timeout".
  const db = await createDatabase({ url: TEST_DATABASE_URL, dataDir: '.', queryTimeoutMs: MAX_TIMER_MS });
  t.teardown(() => db.close());
  const settings = (db.knex.client as unknown as { connectionSettings: { query_timeout: number; statement_timeout: number } }).connectionSettings;
  t.is(settings.statement_timeout, MAX_TIMER_MS);
  t.true(settings.query_timeout <= MAX_TIMER_MS);
  t.deepEqual((await db.knex.raw('select pg_sleep(0.05), 1 as one')).rows.map((row: { one: number }) => row.one), [1]);
});
