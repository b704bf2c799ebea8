import test from 'ava';
import type { Knex } from 'knex';
import { createUserDirectory, ManualClock, newId, type UserRow, type UsersStore } from '../../services/kit/index.js';
import { admitRequest, createSpendLimitsCache } from '../../services/llm-api/usage/index.js';

// The hot path's cached reads (a user's row, a caller's budgets): one query per entry and period,
// shared by concurrent requests, dropped at once by a change made in this process.

const claims = (userId: string) => ({ authMethod: 'apikey' as const, userId, subject: userId, email: null, username: null });

function countingUsers(row: UserRow) {
  let queries = 0;
  let release!: () => void;
  let gate = new Promise<void>((resolve) => (release = resolve));
  const store = {
    async byId() {
      queries++;
      await gate;
      return { ...row };
    },
  } as unknown as UsersStore;
  return {
    store,
    queries: () => queries,
    open() {
      release();
      gate = new Promise<void>((resolve) => (release = resolve));
    },
  };
}

/** A directory (5 s cache) over one user whose lookups are counted and held until `users.open()`. */
function directoryWithOneUser() {
  const clock = new ManualClock();
  const userId = newId('user');
  const row: UserRow = { id: userId, subject: userId, issuer: 'platform', email: null, username: null, is_admin: false, is_guest: false, disabled: false };
  const users = countingUsers(row);
  const directory = createUserDirectory(users.store, { ttlMs: 5000, clock });
  return { clock, userId, row, users, directory };
}

test('concurrent requests for a user whose entry expired share one lookup', async (t) => {
  const { clock, userId, users, directory } = directoryWithOneUser();

  const first = Array.from({ length: 20 }, () => directory.resolve(claims(userId)));
  users.open();
  const principals = await Promise.all(first);
  t.is(users.queries(), 1);
  t.true(principals.every((p) => p?.userId === userId));

  clock.advance(5001);
  const again = Array.from({ length: 20 }, () => directory.resolve(claims(userId)));
  users.open();
  await Promise.all(again);
  t.is(users.queries(), 2, 'one lookup per expiry, whatever the concurrency');
});

test('a lookup already running when the user is invalidated is not handed to later requests', async (t) => {
  const { userId, users, directory } = directoryWithOneUser();
  const before = directory.resolve(claims(userId));
  directory.invalidate(userId);
  const after = directory.resolve(claims(userId));
  users.open();
  await Promise.all([before, after]);
  t.is(users.queries(), 2);
});

test('a cached user is resolved without a promise; a disabled one is null, as after a lookup', async (t) => {
  const { userId, row, users, directory } = directoryWithOneUser();
  const looked = directory.resolve({ ...claims(userId), apiKeyId: 'key_1' });
  t.true(looked instanceof Promise, 'the first request for a user looks it up');
  users.open();
  t.is((await looked)?.userId, userId);
  const cached = directory.resolve({ ...claims(userId), apiKeyId: 'key_2' });
  t.false(cached instanceof Promise);
  t.deepEqual(cached, { userId, subject: userId, email: null, username: null, authMethod: 'apikey', isAdmin: false, isGuest: false, apiKeyId: 'key_2' });
  t.is(users.queries(), 1);

  row.disabled = true;
  directory.invalidate(userId);
  const relooked = directory.resolve(claims(userId));
  users.open();
  t.is(await relooked, null);
});

/**
 * A stand-in for the one query `findSpendLimits` makes: counts calls, answers the rows given. Raw
 * statements (a budget's counter reservation) are recorded and answered as granted (one row).
 */
function fakeKnex(rows: () => unknown[]) {
  let queries = 0;
  const raws: Array<{ sql: string; bindings: unknown[] }> = [];
  const knex = Object.assign(
    () => ({
      where: () => ({
        select: async () => {
          queries++;
          return rows();
        },
      }),
    }),
    {
      raw: async (sql: string, bindings: unknown[]) => {
        raws.push({ sql, bindings });
        return { rows: [{ in_flight: 1 }] };
      },
    },
  ) as unknown as Knex;
  return { knex, queries: () => queries, raws };
}

test('budgets and allow-lists are read once per caller and period, and again at once after a change here', async (t) => {
  const clock = new ManualClock();
  let stored: unknown[] = [];
  const db = fakeKnex(() => stored);
  const cache = createSpendLimitsCache({ ttlMs: 5000, clock });
  const scopes = [
    { scope: 'key' as const, id: 'key_1' },
    { scope: 'user' as const, id: 'user_1' },
  ];

  const reads = await Promise.all(Array.from({ length: 10 }, () => cache.rows(db.knex, scopes)));
  t.is(db.queries(), 1);
  t.true(reads.every((r: unknown[]) => r.length === 0));

  // A budget set through this process: the next admission sees it without waiting for the period.
  stored = [{ scope: 'key', scope_id: 'key_1', period: 'day', max_budget_micro_usd: 10, max_tokens: null, allowed_models: null }];
  cache.invalidate('key', 'key_1');
  t.is((await cache.rows(db.knex, scopes)).length, 1);
  t.is(db.queries(), 2);

  // Set elsewhere (another process): seen once the period is over.
  stored = [];
  t.is((await cache.rows(db.knex, scopes)).length, 1);
  clock.advance(5001);
  t.is((await cache.rows(db.knex, scopes)).length, 0);
  t.is(db.queries(), 3);
});

test('a period of 0 reads the limits on every request', async (t) => {
  const db = fakeKnex(() => []);
  const cache = createSpendLimitsCache({ ttlMs: 0, clock: new ManualClock() });
  await cache.rows(db.knex, [{ scope: 'user', id: 'user_1' }]);
  await cache.rows(db.knex, [{ scope: 'user', id: 'user_1' }]);
  t.is(db.queries(), 2);
});

test('admission with cached limits that set no budget answers at once (no promise); a budget still reserves through the database', async (t) => {
  const clock = new ManualClock();
  let stored: unknown[] = [];
  const db = fakeKnex(() => stored);
  const limitsCache = createSpendLimitsCache({ ttlMs: 5000, clock });
  const deps = { knex: db.knex, clock, limitsCache, logger: { error() {} } } as unknown as Parameters<typeof admitRequest>[0];
  const principal = { userId: 'user_1', subject: 'user_1', email: null, username: null, authMethod: 'apikey' as const, isAdmin: false, isGuest: false, apiKeyId: 'key_1' };

  const first = admitRequest(deps, principal, 'model-a');
  t.true(first instanceof Promise, 'the first request reads the limits');
  t.is(await first, null);
  const cached = admitRequest(deps, principal, 'model-a');
  t.is(cached, null);
  t.is(db.queries(), 1);

  // An allow-list in the cached limits still refuses synchronously, with the same error.
  stored = [{ scope: 'key', scope_id: 'key_1', period: 'day', max_budget_micro_usd: null, max_tokens: null, allowed_models: ['model-b'] }];
  limitsCache.invalidate('key', 'key_1');
  await t.throwsAsync(async () => admitRequest(deps, principal, 'model-a'), { message: /not allowed for this API key/ });
  t.throws(() => admitRequest(deps, principal, 'model-a'), { message: /not allowed for this API key/ });

  // A budget needs its counter reserved: never answered without the database.
  stored = [{ scope: 'key', scope_id: 'key_1', period: 'day', max_budget_micro_usd: 10, max_tokens: null, allowed_models: null }];
  limitsCache.invalidate('key', 'key_1');
  const reservations = () => db.raws.filter((r) => /insert into llm_spend_counters/.test(r.sql)).map((r) => r.bindings.slice(0, 2));
  const ticket = await admitRequest(deps, principal, 'model-a');
  t.is(db.queries(), 3);
  t.is(typeof ticket?.settle, 'function', 'admitted with a ticket to settle');
  t.deepEqual(reservations(), [['key', 'key_1']], "the key's counter reserved");
  const reserving = admitRequest(deps, principal, 'model-a');
  t.true(reserving instanceof Promise, 'cached limits with a budget still go to the counters');
  t.is(typeof (await reserving)?.settle, 'function');
  t.is(db.queries(), 3, 'the limits came from the cache');
  t.deepEqual(reservations(), [['key', 'key_1'], ['key', 'key_1']], 'reserved again, through the database');
});
