import test from 'ava';
import { ConfigError, loadConfig, ManualClock } from '../../../services/kit/index.js';
import { conversationsConfigShape, purgeDeletedConversations } from '../../../services/llm-api/conversations/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { waitFor } from '../../helpers/wait.js';
import { clientFor, text, type Client } from './client.js';

/**
 * From "delete" to "gone": deleting a branch erases the items no other branch references (so an
 * item delete followed by deleting its backup branch erases the content), and soft-deleted
 * conversations are erased with everything they hold after CONVERSATION_PURGE_AFTER_DAYS, by a
 * job that several processes may run at once.
 */
const DAY = 86_400_000;
const clock = new ManualClock(Date.UTC(2026, 10, 1));
let svc: TestService;
let alice: Client;

test.before(async () => {
  // The job's own timer is slow here; tests drive purges directly, one with the running job.
  svc = await startTestService(llmApiService, { clock, env: { CONVERSATION_PURGE_AFTER_DAYS: '30', CONVERSATION_PURGE_INTERVAL_MS: '1000' } });
  alice = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
});
test.after.always(() => svc?.close());

const knex = () => svc.runtime.db.knex;
/**
 * A clock `days` ahead of the service's. Explicit purges look ahead with it, so the service's own
 * job, which reads the service's clock, finds nothing due and never races them.
 */
const ahead = (days: number) => new ManualClock(clock.now() + days * DAY);
const storedItem = async (id: string) => knex()('conversation_items').where({ id }).first();

test.serial('deleting a branch erases the items only it referenced; shared items stay', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const shared = (await alice.post(`/v1/conversations/${id}/items`, { items: [text('shared one'), text('shared two')] })).body.data;
  const side = await alice.post(`/v1/conversations/${id}/branches`, { name: 'side' });
  t.is(side.status, 201, JSON.stringify(side.body));
  await alice.post(`/v1/conversations/${id}/branches/side/activate`);
  const own = (await alice.post(`/v1/conversations/${id}/items`, { items: [text('only on side')] })).body.data[0];
  await alice.post(`/v1/conversations/${id}/branches/MAIN/activate`);

  t.truthy(await storedItem(own.id));
  const deleted = await alice.del(`/v1/conversations/${id}/branches/side`);
  t.is(deleted.status, 200);
  t.is(await storedItem(own.id), undefined, 'the side-only item is physically gone');
  for (const item of shared) t.truthy(await storedItem(item.id), 'items MAIN still references stay');
});

test.serial('item delete, then deleting the backup branch, erases the content for good', async (t) => {
  const id = (await alice.post('/v1/conversations')).body.id as string;
  const [secret] = (await alice.post(`/v1/conversations/${id}/items`, { items: [text('my secret'), text('other')] })).body.data;
  const removed = await alice.del(`/v1/conversations/${id}/items/${secret.id}`);
  t.is(removed.status, 200, JSON.stringify(removed.body));
  t.truthy(await storedItem(secret.id), 'the backup branch still holds it');
  await alice.del(`/v1/conversations/${id}/branches/${removed.body.old_main_backup}`);
  t.is(await storedItem(secret.id), undefined);
  const rows = await knex()('conversation_items').where({ conversation_id: id });
  t.false(JSON.stringify(rows).includes('my secret'));
});

test.serial('soft-deleted conversations are erased after the retention, not before, with every row they own', async (t) => {
  const keep = (await alice.post('/v1/conversations', { items: [text('kept')] })).body.id as string;
  const old = (await alice.post('/v1/conversations', { items: [text('erase me')] })).body.id as string;
  await alice.post(`/v1/conversations/${old}/branches`, { name: 'b2' });
  t.is((await alice.del(`/v1/conversations/${old}`)).status, 200);
  t.is((await alice.get(`/v1/conversations/${old}`)).status, 404);

  t.is(await purgeDeletedConversations({ knex: knex(), clock: ahead(29), afterDays: 30 }), 0, 'not yet');
  t.truthy(await knex()('conversations').where({ id: old }).first());

  t.is(await purgeDeletedConversations({ knex: knex(), clock: ahead(31), afterDays: 0 }), 0, '0 means never');
  t.is(await purgeDeletedConversations({ knex: knex(), clock: ahead(31), afterDays: 30 }), 1);
  for (const table of ['conversations', 'conversation_items', 'conversation_branches'] as const) {
    const column = table === 'conversations' ? 'id' : 'conversation_id';
    t.is((await knex()(table).where({ [column]: old })).length, 0, table);
  }
  t.truthy(await knex()('conversations').where({ id: keep }).first(), 'live conversations are untouched');
});

test.serial('concurrent purges (several processes) erase each conversation once, without errors or waits', async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < 12; i++) {
    const id = (await alice.post('/v1/conversations', { items: [text(`c${i}`)] })).body.id as string;
    await alice.del(`/v1/conversations/${id}`);
    ids.push(id);
  }
  const later = ahead(31);
  const counts = await Promise.all([1, 2, 3].map(() => purgeDeletedConversations({ knex: knex(), clock: later, afterDays: 30, batchSize: 2 })));
  t.is(counts.reduce((a, b) => a + b, 0), 12);
  t.is((await knex()('conversations').whereIn('id', ids)).length, 0);
});

test.serial('the running job erases expired conversations on its own', async (t) => {
  const id = (await alice.post('/v1/conversations', { items: [text('job')] })).body.id as string;
  await alice.del(`/v1/conversations/${id}`);
  clock.advance(31 * DAY);
  t.true(await waitFor(async () => !(await knex()('conversations').where({ id }).first()), 10_000, 'purge job'));
});

test('a purge interval longer than a timer can wait is refused at start (Node would run the purge every millisecond)', (t) => {
  const error = t.throws(() => loadConfig(conversationsConfigShape, { CONVERSATION_PURGE_AFTER_DAYS: '30', CONVERSATION_PURGE_INTERVAL_MS: String(30 * DAY) }), { instanceOf: ConfigError });
  t.is((error as ConfigError).variable, 'CONVERSATION_PURGE_INTERVAL_MS');
  t.is(loadConfig(conversationsConfigShape, { CONVERSATION_PURGE_INTERVAL_MS: '2147483647' }).CONVERSATION_PURGE_INTERVAL_MS, 2_147_483_647, 'the longest a timer waits (about 24.8 days) is fine');
});
