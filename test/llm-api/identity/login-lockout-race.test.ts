import test from 'ava';
import { ApiError, ManualClock, randomBase62 } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { hashPassword } from '../../../services/llm-api/identity/passwords/hashing.js';
import { createPasswordStore } from '../../../services/llm-api/identity/passwords/store.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { watched } from '../../helpers/wait.js';
import { call, passwordsWith } from './helpers.js';

// The sign-in lockout under concurrent attempts. Each attempt takes its turn (a numbered
// reservation under a row lock) before its password is checked, so a burst of guesses gets at most
// LOGIN_MAX_FAILURES checks per lockout window, however many arrive together. The domain tests
// hold every password check in a gate until the test releases it (no waiting on time), and count
// the checks; the HTTP tests use the real scrypt check and the stored counter.
const MAX = 5;
const LOCKOUT_SECONDS = 900;
const clock = new ManualClock(Date.UTC(2026, 11, 1, 9, 0, 0));
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock, env: { LOGIN_MAX_FAILURES: String(MAX), LOGIN_LOCKOUT_SECONDS: String(LOCKOUT_SECONDS) } });
});
test.after.always(() => svc?.close());

/** A stand-in hash the gate's check understands (the gate never runs scrypt). */
const fakeHash = (password: string) => `test-hash:${password}`;

/**
 * Password checks held until released, one by one. `progress` counts checks started plus attempts
 * answered, so the test can wait for "every attempt is being checked or has its answer" whatever
 * the code does with them (with or without the fix, nothing hangs).
 */
function gate(hold: (password: string, check: number) => boolean = () => true) {
  const held: Array<{ password: string; release: () => void }> = [];
  const progress = watched();
  let checks = 0;
  let events = 0;
  const bump = () => progress.set(++events);
  const verify = (password: string, encoded: string) => {
    const check = ++checks;
    bump();
    const answer = encoded === fakeHash(password);
    if (!hold(password, check)) return Promise.resolve(answer);
    return new Promise<boolean>((resolve) => held.push({ password, release: () => resolve(answer) }));
  };
  const releaseWhere = (match: (password: string) => boolean) => {
    for (const entry of held.filter((h) => match(h.password))) {
      held.splice(held.indexOf(entry), 1);
      entry.release();
    }
  };
  return { verify, held, progress, bump, checks: () => checks, releaseWhere, releaseAll: () => releaseWhere(() => true) };
}

/** A user with a password (stored as `hash(password)`), and the counters row of its address. */
async function account(hash: (password: string) => Promise<string> | string) {
  const user = await createTestUser(svc.runtime.db.knex);
  const password = `pw-${randomBase62(20)}`;
  await createPasswordStore(svc.runtime.db.knex).setHash(svc.runtime.db.knex, user.id, await hash(password), clock.now());
  return { ...user, password };
}

/** The counters rows (each test starts with none, and its attempts touch one address). */
async function counters() {
  const rows = await svc.runtime.db.knex('identity_login_attempts').select('attempts', 'counted_from', 'failures', 'locked_until');
  return rows.map((r) => ({ attempts: Number(r.attempts), counted_from: Number(r.counted_from), failures: Number(r.failures), locked: r.locked_until !== null }));
}

/** The failure counts stored (the column every version of the table has). */
async function failures() {
  const rows = await svc.runtime.db.knex('identity_login_attempts').select('failures', 'locked_until');
  return rows.map((r) => ({ failures: Number(r.failures), locked: r.locked_until !== null }));
}

/** What a login answered: 200, or the ApiError's status and code. */
async function outcome(attempt: Promise<unknown>) {
  try {
    await attempt;
    return { status: 200, code: null as string | null, retryAfter: null as string | null };
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return { status: error.status, code: error.code, retryAfter: error.headers['retry-after'] ?? null };
  }
}

test.serial('a burst of wrong guesses gets LOGIN_MAX_FAILURES checks, the rest 429; the right password sent after the limit is refused', async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const victim = await account(fakeHash);
  // Wrong guesses are held in their check; the right password would be answered at once.
  const g = gate((password) => password !== victim.password);
  const passwords = passwordsWith(svc, clock, g.verify, { maxFailures: MAX, lockoutSeconds: LOCKOUT_SECONDS });
  const N = 30;
  try {
    const burst = Array.from({ length: N }, (_, i) => outcome(passwords.login(victim.email, `wrong-guess-${i}`)).finally(g.bump));
    // Every guess is either being checked or answered.
    await g.progress.reached(N);
    t.is(g.checks(), MAX, `${g.checks()} of ${N} concurrent guesses reached the password check`);

    // The right password inside the burst, after the limit: refused without a check.
    const right = await outcome(passwords.login(victim.email, victim.password));
    t.is(right.status, 429, 'the right password after the limit gets no check');
    t.is(right.code, 'login_locked');
    t.is(g.checks(), MAX);

    g.releaseAll();
    const answers = await Promise.all(burst);
    const refused = answers.filter((a) => a.status === 429);
    t.true(answers.every((a) => a.status === 401 || a.status === 429), JSON.stringify(answers));
    t.true(refused.length >= N - MAX + 1, `${refused.length} refusals: all unchecked guesses and the one that reached the limit`);
    t.true(refused.every((a) => a.code === 'login_locked' && a.retryAfter !== null));
    t.deepEqual(await counters(), [{ attempts: MAX, counted_from: 0, failures: MAX, locked: true }]);

    // Locked now: the right password is refused until the window ends.
    t.is((await outcome(passwords.login(victim.email, victim.password))).status, 429);
    t.is(g.checks(), MAX);
  } finally {
    g.releaseAll();
  }
});

test.serial("a success writes off the attempts taken before it, not those taken after it; more than the limit at once wait", async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const user = await account(fakeHash);
  let holding = true;
  // The first five checks are held; any later one (there should be none while they are) answers at once.
  const g = gate((_, check) => holding && check <= 5);
  const passwords = passwordsWith(svc, clock, g.verify, { maxFailures: MAX, lockoutSeconds: LOCKOUT_SECONDS });
  try {
    // One at a time into the check: a wrong guess (1), the owner (2), three more wrong guesses (3–5).
    const order = ['wrong-1', user.password, 'wrong-3', 'wrong-4', 'wrong-5'];
    const pending: Array<Promise<Awaited<ReturnType<typeof outcome>>>> = [];
    for (const [i, password] of order.entries()) {
      pending.push(outcome(passwords.login(user.email, password)));
      await g.progress.reached(i + 1);
    }
    // Five attempts are being checked: a sixth (even the right password) waits its turn.
    const sixth = outcome(passwords.login(user.email, user.password));
    const busy = await sixth;
    t.is(busy.status, 429, 'no sixth check while five are in progress');
    t.is(busy.retryAfter, '1');
    t.is(g.checks(), order.length);

    // The guesses taken after the owner's attempt fail first, then the owner's check succeeds.
    g.releaseWhere((password) => password === 'wrong-3' || password === 'wrong-4' || password === 'wrong-5');
    const later = await Promise.all(pending.slice(2));
    t.true(later.every((a) => a.status === 401 || a.status === 429), JSON.stringify(later));
    g.releaseWhere((password) => password === user.password);
    t.is((await pending[1]!).status, 200, "the owner's attempt, taken before those guesses, signs in");
    g.releaseWhere((password) => password === 'wrong-1');
    t.is((await pending[0]!).status, 401);
    // Attempts 1 and 2 written off by the success; 3–5 still count (and the lock they caused is lifted).
    t.deepEqual(await counters(), [{ attempts: 5, counted_from: 2, failures: 3, locked: false }]);

    // So two more failures lock the address, as three failures after a success and two more would.
    holding = false;
    t.is((await outcome(passwords.login(user.email, 'wrong-6'))).status, 401);
    t.is((await outcome(passwords.login(user.email, 'wrong-7'))).status, 429);
    t.is((await outcome(passwords.login(user.email, user.password))).status, 429);
  } finally {
    g.releaseAll();
  }
});

test.serial('a check that throws counts as a failure', async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const user = await account(fakeHash);
  const passwords = passwordsWith(svc, clock, () => Promise.reject(new Error('scrypt failed')), { maxFailures: MAX, lockoutSeconds: LOCKOUT_SECONDS });
  for (let i = 0; i < MAX; i++) await t.throwsAsync(passwords.login(user.email, user.password), { message: 'scrypt failed' });
  t.is((await outcome(passwords.login(user.email, user.password))).status, 429);
  t.deepEqual(await counters(), [{ attempts: MAX, counted_from: 0, failures: MAX, locked: true }]);
});

test.serial('through the service with scrypt: concurrent wrong guesses make LOGIN_MAX_FAILURES checks, then the right password is refused', async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const victim = await account(hashPassword);
  const N = 20;
  const answers = await Promise.all(Array.from({ length: N }, (_, i) => call(svc, 'POST', '/auth/login', { body: { email: victim.email, password: `wrong-guess-${i}` } })));
  const statuses = answers.map((a) => a.status);
  t.true(statuses.every((s) => s === 401 || s === 429), JSON.stringify(statuses));
  t.true(statuses.filter((s) => s === 401).length <= MAX - 1, JSON.stringify(statuses));
  for (const a of answers.filter((r) => r.status === 429)) {
    t.is(a.body.error.code, 'login_locked');
    t.truthy(a.headers.get('retry-after'));
  }
  // Every attempt that got a check is counted as a failure: exactly the limit, the rest never reached scrypt.
  t.deepEqual(await failures(), [{ failures: MAX, locked: true }]);
  const right = await call(svc, 'POST', '/auth/login', { body: { email: victim.email, password: victim.password } });
  t.is(right.status, 429, JSON.stringify(right.body));
});

test.serial('through the service with scrypt: concurrent sign-ins with the right password all succeed and leave nothing counted', async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const user = await account(hashPassword);
  const answers = await Promise.all(Array.from({ length: MAX }, () => call(svc, 'POST', '/auth/login', { body: { email: user.email, password: user.password } })));
  t.deepEqual(answers.map((a) => a.status), Array(MAX).fill(200), JSON.stringify(answers.map((a) => a.body)));
  t.deepEqual((await failures()).filter((row) => row.failures > 0 || row.locked), [], 'nothing counted');
  // The full allowance is there again: LOGIN_MAX_FAILURES - 1 failures answer 401, the next locks.
  for (let i = 1; i < MAX; i++) t.is((await call(svc, 'POST', '/auth/login', { body: { email: user.email, password: `wrong-${i}` } })).status, 401);
  t.is((await call(svc, 'POST', '/auth/login', { body: { email: user.email, password: 'wrong-last' } })).status, 429);
});

test.serial('an address spelled with a character the database lowers differently (U+0130) does not get past the lockout of the address', async (t) => {
  await svc.runtime.db.knex('identity_login_attempts').delete();
  const knex = svc.runtime.db.knex;
  const victim = await account(fakeHash);
  const email = `christina.${victim.id.slice(-8).toLowerCase()}@example.test`;
  await knex('users').where({ id: victim.id }).update({ email });
  // PostgreSQL lowers "İ" to "i"; JavaScript to "i" and a combining dot. Looked up by the database's
  // lowering and counted by JavaScript's, the variant found the account under a lockout of its own:
  // one more allowance of guesses per "i" in the address. It must not sign in while the address is locked.
  const variant = email.replace('i', '\u0130');
  t.not(variant, email);
  const passwords = passwordsWith(svc, clock, gate(() => false).verify, { maxFailures: MAX, lockoutSeconds: LOCKOUT_SECONDS });
  for (let i = 0; i < MAX; i++) await outcome(passwords.login(email, `wrong-${i}`));
  t.is((await outcome(passwords.login(email, victim.password))).status, 429, 'the address itself is locked');
  const right = await outcome(passwords.login(variant, victim.password));
  t.not(right.status, 200, 'the variant spelling does not get past the lockout');
  t.true(right.status === 401 || right.status === 429, JSON.stringify(right));
});
