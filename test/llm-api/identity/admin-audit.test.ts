import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { assertError, bearerHeaders, call, identityOf } from './helpers.js';

// User administration as an operator meets it: the platform never ends up without an enabled
// administrator, whether the demotions come one after the other or at the same time (each test
// starts from "no administrator" and makes the ones it needs). And claims on names: an upgrade's
// e-mail and username are claimed without two upgrades waiting on each other; a refresh token
// rotated while its user is disabled or changes the password does not outlive the revocation.
// Serial: one clock, and the administrators of one schema.
const clock = new ManualClock(Date.UTC(2026, 11, 7, 3, 0, 0));
let svc: TestService;

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
});
test.after.always(() => svc?.close());

const as = (user: TestUser) => edgeHeaders(svc.gatewaySecret, user);
const patch = (actor: TestUser, target: TestUser, body: unknown) => call(svc, 'PATCH', `/v1/admin/users/${target.id}`, { headers: as(actor), body });
const enabledAdmins = async () => (await svc.runtime.db.knex('users').where({ is_admin: true, disabled: false }).select('id')).map((row) => row.id as string);

/** Exactly `n` enabled administrators: every earlier one demoted (and forgotten by the directory). */
async function onlyAdmins(n: number): Promise<TestUser[]> {
  await svc.runtime.db.knex('users').update({ is_admin: false });
  svc.runtime.users.invalidate();
  const admins: TestUser[] = [];
  for (let i = 0; i < n; i++) admins.push(await createTestUser(svc.runtime.db.knex, { admin: true }));
  return admins;
}

for (const field of ['is_admin', 'disabled'] as const) {
  test.serial(`two administrators removing each other at once (${field}): one wins, an enabled administrator remains`, async (t) => {
    const [a, b] = await onlyAdmins(2);
    const body = field === 'is_admin' ? { is_admin: false } : { disabled: true };
    const replies = await Promise.all([patch(a!, b!, body), patch(b!, a!, body)]);
    const statuses = replies.map((r) => r.status).sort();
    t.is(statuses[0], 200, JSON.stringify(replies.map((r) => r.body)));
    // The loser is refused: 409 when its change was checked after the winner's, 403 when the
    // winner's change reached the loser's own admin check first.
    t.true(statuses[1] === 409 || statuses[1] === 403, JSON.stringify(replies.map((r) => r.body)));
    const loser = replies.find((r) => r.status !== 200)!;
    if (loser.status === 409) assertError(t, loser, 409, field);
    t.is((await enabledAdmins()).length, 1);
  });
}

test.serial('the last enabled administrator cannot be demoted or disabled by an administrator the platform no longer counts', async (t) => {
  // `actor` was an administrator when its request was authorised and lost the role since (another
  // process, a concurrent request): `last` is the only enabled administrator left.
  const [actor, last] = await onlyAdmins(2);
  await svc.runtime.db.knex('users').where({ id: actor!.id }).update({ is_admin: false });
  const userAdmin = identityOf(svc.runtime).userAdmin;
  for (const change of [{ is_admin: false }, { disabled: true }]) {
    const error = await t.throwsAsync(() => userAdmin.patch(actor!.id, last!.id, change));
    t.is((error as { status?: number }).status, 409, JSON.stringify(change));
    t.is((error as { param?: string }).param, Object.keys(change)[0]);
  }
  t.deepEqual(await enabledAdmins(), [last!.id]);
  // A disabled administrator does not count as one left.
  const disabledAdmin = await createTestUser(svc.runtime.db.knex, { admin: true });
  await svc.runtime.db.knex('users').where({ id: disabledAdmin.id }).update({ disabled: true });
  await t.throwsAsync(() => userAdmin.patch(actor!.id, last!.id, { is_admin: false }));
  t.deepEqual(await enabledAdmins(), [last!.id]);
});

test.serial('with another enabled administrator left, demoting, disabling and re-enabling still work', async (t) => {
  const [a, b, c] = await onlyAdmins(3);
  const demoted = await patch(a!, b!, { is_admin: false });
  t.is(demoted.status, 200, JSON.stringify(demoted.body));
  t.false(demoted.body.is_admin);
  const disabled = await patch(a!, c!, { disabled: true });
  t.is(disabled.status, 200, JSON.stringify(disabled.body));
  t.true(disabled.body.disabled);
  // A disabled administrator's flag can be cleared (it takes no enabled administrator away)…
  t.is((await patch(a!, c!, { is_admin: false })).status, 200);
  // …and promoting again works as before.
  t.is((await patch(a!, b!, { is_admin: true })).status, 200);
  t.deepEqual((await enabledAdmins()).sort(), [a!.id, b!.id].sort());
});

test.serial('two upgrades claiming each other\'s e-mail as username do not deadlock: both succeed', async (t) => {
  const knex = svc.runtime.db.knex;
  const guest = async () => bearerHeaders(svc, (await call(svc, 'POST', '/llm/auth/guest-login')).body.access_token, clock);
  const [first, second] = [await guest(), await guest()];
  // A username may look like an e-mail. The claim on 'p@q.example' is held while the two upgrades
  // queue behind it, so both have taken whatever they take before it when it is released.
  const [p, r] = ['p@q.example', 'r@s.example'];
  const waitingOn = async (name: string) => {
    const [row] = (
      await knex.raw(
        `select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted
           and database = (select oid from pg_database where datname = current_database())
           and objid::bigint = (hashtext(?)::bigint & 4294967295)`,
        [`identity:name:${name}`],
      )
    ).rows;
    return row.n as number;
  };
  const holder = await knex.transaction();
  try {
    await holder.raw('select pg_advisory_xact_lock(hashtext(?))', [`identity:name:${p}`]);
    const one = call(svc, 'POST', '/auth/upgrade', { headers: first, body: { email: p, username: r } });
    await waitFor(async () => (await waitingOn(p)) === 1, 10_000, 'the first upgrade waiting');
    const two = call(svc, 'POST', '/auth/upgrade', { headers: second, body: { email: r, username: p } });
    await waitFor(async () => (await waitingOn(p)) === 2, 10_000, 'the second upgrade waiting');
    await holder.commit();
    const replies = await Promise.all([one, two]);
    t.deepEqual(replies.map((reply) => reply.status), [200, 200], JSON.stringify(replies.map((reply) => reply.body)));
    t.deepEqual(replies.map((reply) => [reply.body.email, reply.body.username]), [[p, r], [r, p]]);
  } finally {
    if (!holder.isCompleted()) await holder.rollback();
  }
});

/**
 * Rotates `refreshToken` with the rotation held after its checks (before its successor is written
 * and committed) while `revoke` runs, until `revoke` waits for it; answers the successor.
 */
async function rotateDuring<T>(refreshToken: string, revoke: () => Promise<T>): Promise<{ successor: string; revoked: T }> {
  const knex = svc.runtime.db.knex;
  let entered!: () => void;
  let release!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  const gate = new Promise<void>((resolve) => (release = resolve));
  const rotating = identityOf(svc.runtime).refreshTokens.rotate(refreshToken, async () => {
    entered();
    await gate;
    return true;
  });
  await inside;
  const revoking = revoke();
  // The revoking transaction waits for the rotation (on the user row, or on the token's row).
  const waiting = async () => {
    const { rows } = await knex.raw(
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'
         and (query like '%identity_refresh_tokens%' or query like '%"users"%')`,
    );
    return rows[0].n >= 1;
  };
  await waitFor(waiting, 10_000, 'the revocation waiting on the rotation');
  release();
  return { successor: (await rotating).next.token, revoked: await revoking };
}

test.serial('a refresh token rotated while its user is being disabled is revoked with the others (not back on re-enabling)', async (t) => {
  const [admin] = await onlyAdmins(1);
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  const guest = { id: login.body.user_id as string } as TestUser;
  const { successor, revoked } = await rotateDuring(login.body.refresh_token, () => patch(admin!, guest, { disabled: true }));
  t.is(revoked.status, 200, JSON.stringify(revoked.body));
  t.is((await patch(admin!, guest, { disabled: false })).status, 200);
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: successor } }), 401, 'refresh_token');
  t.true((await svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: guest.id })).every((row) => row.revoked_at !== null));
});

test.serial('a refresh token rotated while its session signs out is revoked with the session (signing out waits for the rotation)', async (t) => {
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  // A background refresh, or a thief looping on a stolen token, rotates it while the owner signs out with it.
  const { successor, revoked } = await rotateDuring(login.body.refresh_token, () => call(svc, 'POST', '/auth/logout', { body: { refresh_token: login.body.refresh_token } }));
  t.is(revoked.status, 200, JSON.stringify(revoked.body));
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: successor } }), 401, 'refresh_token');
  t.true((await svc.runtime.db.knex('identity_refresh_tokens').where({ user_id: login.body.user_id })).every((row) => row.revoked_at !== null));
});

test.serial('a refresh token rotated during a password change is revoked with the others', async (t) => {
  const login = await call(svc, 'POST', '/llm/auth/guest-login');
  const password = 'correct horse battery';
  const user = { id: login.body.user_id as string, email: `${login.body.user_id}@example.test`.toLowerCase(), username: 'owner', is_admin: false };
  const headers = await bearerHeaders(svc, login.body.access_token, clock);
  t.is((await call(svc, 'POST', '/auth/upgrade', { headers, body: { email: user.email, password } })).status, 200);
  // Whoever holds the old refresh token rotates it while the owner changes the password.
  const { successor, revoked } = await rotateDuring(login.body.refresh_token, () =>
    call(svc, 'POST', '/auth/password', { headers: as(user), body: { current_password: password, new_password: 'another horse battery' } }),
  );
  t.is(revoked.status, 200, JSON.stringify(revoked.body));
  assertError(t, await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: successor } }), 401, 'refresh_token');
  // The new pair the change handed out still works.
  t.is((await call(svc, 'POST', '/llm/auth/refresh', { body: { refresh_token: revoked.body.refresh_token } })).status, 200);
});
