import test from 'ava';
import type { Knex } from 'knex';
import { createUserDirectory, ManualClock, newId, type UserRow, type UsersStore } from '../../services/kit/index.js';
import { createSpendLimitsCache } from '../../services/llm-api/usage/index.js';

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

test('concurrent requests for a user whose entry expired share one lookup', async (t) => {
  const clock = new ManualClock();
  const userId = newId('user');
  const row: UserRow = { id: userId, subject: userId, issuer: 'platform', email: null, username: null, is_admin: false, is_guest: false, disabled: false };
  const users = countingUsers(row);
  const directory = createUserDirectory(users.store, { ttlMs: 5000, clock });

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
  const clock = new ManualClock();
  const userId = newId('user');
  const row: UserRow = { id: userId, subject: userId, issuer: 'platform', email: null, username: null, is_admin: false, is_guest: false, disabled: false };
  const users = countingUsers(row);
  const directory = createUserDirectory(users.store, { ttlMs: 5000, clock });
  const before = directory.resolve(claims(userId));
  directory.invalidate(userId);
  const after = directory.resolve(claims(userId));
  users.open();
  await Promise.all([before, after]);
  t.is(users.queries(), 2);
});

/** A stand-in for the one query `findSpendLimits` makes: counts calls, answers the rows given. */
function fakeKnex(rows: () => unknown[]) {
  let queries = 0;
  const knex = (() => ({
    where: () => ({
      select: async () => {
        queries++;
        return rows();
      },
    }),
  })) as unknown as Knex;
  return { knex, queries: () => queries };
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
