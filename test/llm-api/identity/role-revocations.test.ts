import test from 'ava';
import { ManualClock, randomBase62, userRevocation } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../../helpers/users.js';
import { call, identityOf } from './helpers.js';

// A change of a user's role or standing (is_admin, disabled, email_verified) publishes `user:<id>`
// on the revocation channel, so the edge's API-key validation cache drops the answers it holds for
// the user's keys (they carry is_admin) and every process's user directory forgets the row, at
// once rather than after their TTLs. A PATCH that changes none of them publishes nothing.
// The channel is the in-process one (no REDIS_URL): a message is delivered before publish returns.
const clock = new ManualClock(Date.UTC(2026, 11, 1, 9, 0, 0));
let svc: TestService;
let admin: TestUser;
const heard: string[] = [];

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
  admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  await svc.runtime.revocations.subscribe({ onRevoked: (m) => void heard.push(m), onResync: () => {} });
});
test.after.always(() => svc?.close());

const patch = (id: string, body: unknown) => call(svc, 'PATCH', `/v1/admin/users/${id}`, { headers: edgeHeaders(svc.gatewaySecret, admin), body });

/** The revocations published while `run` ran. */
async function published(run: () => Promise<unknown>): Promise<string[]> {
  const from = heard.length;
  await run();
  return heard.slice(from);
}

test.serial('promoting and demoting an administrator publishes user:<id> each time', async (t) => {
  const member = await createTestUser(svc.runtime.db.knex);
  const promoted = await published(async () => t.is((await patch(member.id, { is_admin: true })).status, 200));
  t.deepEqual(promoted, [userRevocation(member.id)]);
  const demoted = await published(async () => {
    const reply = await patch(member.id, { is_admin: false });
    t.is(reply.status, 200);
    t.false(reply.body.is_admin);
  });
  t.deepEqual(demoted, [userRevocation(member.id)]);
});

test.serial('email_verified and re-enabling publish user:<id>; a PATCH that changes nothing publishes nothing', async (t) => {
  const member = await createTestUser(svc.runtime.db.knex);
  t.deepEqual(await published(() => patch(member.id, { email_verified: true })), [userRevocation(member.id)]);
  t.deepEqual(await published(() => patch(member.id, { email_verified: true, is_admin: false })), [], 'already so');
  t.deepEqual(await published(() => patch(member.id, { disabled: false })), [], 'already enabled');
  // Disabling revokes (and publishes) as before; enabling again is a change the caches must hear too.
  t.true((await published(() => patch(member.id, { disabled: true }))).includes(userRevocation(member.id)));
  t.deepEqual(await published(() => patch(member.id, { disabled: false })), [userRevocation(member.id)]);
});

test.serial('the bootstrap admin restored at start (it was demoted) publishes user:<id>; already in order, nothing', async (t) => {
  const secret = `sk_${randomBase62(32)}`;
  const identity = identityOf(svc.runtime);
  const first = await identity.apiKeys.ensureBootstrapAdmin(secret);
  t.true(first.created);
  t.deepEqual(await published(() => identity.apiKeys.ensureBootstrapAdmin(secret)), [], 'nothing to restore');
  await svc.runtime.db.knex('users').where({ id: first.userId }).update({ is_admin: false });
  const restored = await published(() => identity.apiKeys.ensureBootstrapAdmin(secret));
  t.deepEqual(restored, [userRevocation(first.userId)]);
  t.true((await svc.runtime.db.knex('users').where({ id: first.userId }).first()).is_admin);
});
