import test from 'ava';
import { ApiError, ManualClock, randomBase62 } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { createPasswordStore } from '../../../services/llm-api/identity/passwords/store.js';
import { verifyPassword } from '../../../services/llm-api/identity/passwords/hashing.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { call, identityOf, passwordsWith } from './helpers.js';

// A sign-in whose password was checked just before the password was changed or reset must not
// come out with a session the change never ended. The sign-in's password check is held in a gate
// (no waiting on time) while the change runs, then released.
const clock = new ManualClock(Date.UTC(2026, 11, 7, 9, 0, 0));
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
});
test.after.always(() => svc?.close());

/** A stand-in hash the gate's check understands (no scrypt). */
const fakeHash = (password: string) => `test-hash:${password}`;

/** Password checks answered at once, except the first, which is held until `release`. */
function firstCheckHeld() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let started!: () => void;
  const checking = new Promise<void>((resolve) => (started = resolve));
  let checks = 0;
  const verify = async (password: string, encoded: string) => {
    const answer = encoded === fakeHash(password);
    if (++checks === 1) {
      started();
      await released;
    }
    return answer;
  };
  return { verify, checking, release };
}

async function account() {
  const user = await createTestUser(svc.runtime.db.knex);
  const password = `pw-${randomBase62(20)}`;
  await createPasswordStore(svc.runtime.db.knex).setHash(svc.runtime.db.knex, user.id, fakeHash(password), clock.now());
  return { ...user, password };
}

/** The login's answer: its refresh token, or the ApiError's status and code. */
async function outcome(attempt: Promise<{ refresh_token: string }>) {
  try {
    return { status: 200, code: null as string | null, refreshToken: (await attempt).refresh_token };
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return { status: error.status, code: error.code, refreshToken: null };
  }
}

/** Refresh tokens of the user nobody revoked. */
const liveRefreshTokens = (userId: string) => svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: userId }).whereNull('revoked_at').count<{ n: number }[]>({ n: '*' }).then((rows) => Number(rows[0]!.n));

test.serial('a sign-in held in its password check while nothing changes still signs in (the gate itself lets it through)', async (t) => {
  const user = await account();
  const gate = firstCheckHeld();
  const login = outcome(passwordsWith(svc, clock, gate.verify).login(user.email, user.password));
  await gate.checking;
  gate.release();
  const answer = await login;
  t.is(answer.status, 200);
  const refreshed = await call(svc, 'POST', '/auth/refresh', { body: { refresh_token: answer.refreshToken } });
  t.is(refreshed.status, 200, JSON.stringify(refreshed.body));
});

test.serial("an administrator's reset-login that lands while a sign-in's old password is being checked: the sign-in gets no session", async (t) => {
  const user = await account();
  const gate = firstCheckHeld();
  const login = outcome(passwordsWith(svc, clock, gate.verify).login(user.email, user.password));
  await gate.checking; // the old password is right; the check has not answered yet
  const reset = await identityOf(svc.runtime).passwords.resetLogin(user.id);
  t.true(typeof reset.temporary_password === 'string');
  gate.release();
  const answer = await login;
  t.like(answer, { status: 401, code: 'invalid_credentials' });
  t.is(await liveRefreshTokens(user.id), 0, 'no session survives the reset');
});

test.serial("the owner's password change that lands while another sign-in's old password is being checked: that sign-in gets no session", async (t) => {
  const user = await account();
  const gate = firstCheckHeld();
  const passwords = passwordsWith(svc, clock, gate.verify);
  const thief = outcome(passwords.login(user.email, user.password));
  await gate.checking;
  const newPassword = `new-${randomBase62(20)}`;
  const owner = await passwords.change(user.id, user.password, newPassword); // its own check is not held
  gate.release();
  t.like(await thief, { status: 401, code: 'invalid_credentials' });
  // Only the owner's new session is left.
  t.is(await liveRefreshTokens(user.id), 1);
  t.is((await call(svc, 'POST', '/auth/refresh', { body: { refresh_token: owner.refresh_token } })).status, 200);
});

test.serial('two password changes with the same current password at once: the later one is a 409 and the first stays the password, with its session', async (t) => {
  const user = await account();
  const gate = firstCheckHeld();
  const passwords = passwordsWith(svc, clock, gate.verify);
  const first = `first-${randomBase62(20)}`;
  const second = `second-${randomBase62(20)}`;
  const held = outcome(passwords.change(user.id, user.password, second)); // checked against the old password, then held
  await gate.checking;
  const landed = await passwords.change(user.id, user.password, first); // not held: changes the password meanwhile
  gate.release();
  t.like(await held, { status: 409, code: 'conflict', refreshToken: null });
  // The password that landed first is kept, and its session is the one left.
  t.is(await liveRefreshTokens(user.id), 1);
  t.is((await call(svc, 'POST', '/auth/refresh', { body: { refresh_token: landed.refresh_token } })).status, 200);
  const hash = (await createPasswordStore(svc.runtime.db.knex).hashOf(user.id))!;
  t.true(await verifyPassword(first, hash));
  t.false(await verifyPassword(second, hash));
});

test.serial('two first passwords set at once (no password yet): one is stored, the other is a 409, never a silent overwrite', async (t) => {
  const user = await createTestUser(svc.runtime.db.knex); // signed up without a password: no current one to give
  const real = createPasswordStore(svc.runtime.db.knex);
  // Both changes read "no password yet"; the first to store one keeps its transaction open until the
  // second's write waits on it, so the second writes over a row it could not see when it read.
  let arrived = 0;
  let bothRead!: () => void;
  const barrier = new Promise<void>((resolve) => (bothRead = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let writes = 0;
  const holdFirstWrite = async () => {
    if (++writes === 1) await released;
  };
  const store: typeof real = {
    ...real,
    async hashOf(userId, db) {
      const hash = await real.hashOf(userId, db);
      if (db === undefined && ++arrived <= 2) {
        if (arrived === 2) bothRead();
        await barrier;
      }
      return hash;
    },
    async insertHashIfNone(db, userId, hash, now) {
      const inserted = await real.insertHashIfNone(db, userId, hash, now);
      await holdFirstWrite();
      return inserted;
    },
    async setHash(db, userId, hash, now) {
      await real.setHash(db, userId, hash, now);
      await holdFirstWrite();
    },
  };
  const passwords = passwordsWith(svc, clock, async () => false, undefined, store);
  const a = `first-a-${randomBase62(20)}`;
  const b = `first-b-${randomBase62(20)}`;
  // A first password is set with a recently issued access token (the account has no password to give).
  const { token } = await identityOf(svc.runtime).issuer!.sign({ ...user, is_guest: false });
  const both = Promise.all([outcome(passwords.change(user.id, undefined, a, token)), outcome(passwords.change(user.id, undefined, b, token))]);
  // The second change's write waits for the first's transaction.
  await waitFor(async () => {
    const waiting = await svc.runtime.db.knex.raw("select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%identity_passwords%'");
    return waiting.rows.length > 0;
  }, 30_000, 'the second write waiting on the first');
  release();
  const [ra, rb] = await both;
  t.deepEqual([ra.status, rb.status].sort(), [200, 409], JSON.stringify([ra, rb]));
  const winner = ra.status === 200 ? a : b;
  const loser = ra.status === 200 ? b : a;
  const hash = (await real.hashOf(user.id))!;
  t.true(await verifyPassword(winner, hash));
  t.false(await verifyPassword(loser, hash));
  t.like(ra.status === 409 ? ra : rb, { code: 'conflict' });
  // The winner's session is the one left.
  t.is(await liveRefreshTokens(user.id), 1);
});
