import test from 'ava';
import OpenAI, { PermissionDeniedError } from 'openai';
import { ManualClock, randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { bootstrapAdmin, keyClient, startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { chatRecordFields } from '../helpers/records.js';
import { waitFor } from '../helpers/wait.js';

// GET /v1/admin/requests through the edge: every request llm-api served lands in the bounded
// recent-requests log (written in batches), findable by request id, user or key, paginated, and
// pruned to its row cap and retention window (manual clock).
// The tests wait for rows by reading the table itself: polling the admin route would log rows of
// its own and could push the rows under test out of the capped log.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
// A cap of 10 makes the prune threshold (a tenth of the cap) one row, so every batch is followed by
// a prune and the table is at the cap as soon as the writer is idle.
const MAX_ROWS = 10;
const clock = new ManualClock();
let p: TestPlatform;
let fake: FakeUpstream;
let admin: OpenAI;
let user: OpenAI;
let ids: { admin: string; adminKey: string; user: string; userKey: string; provider: string };

test.before(async () => {
  fake = await startFakeUpstream({ name: 'alpha', models: [{ id: 'model-a' }] });
  p = await startTestPlatform({
    clock,
    env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', REQUEST_LOG_FLUSH_MS: '20', REQUEST_LOG_MAX_ROWS: String(MAX_ROWS), REQUEST_LOG_RETENTION_HOURS: '2' },
  });
  const bootstrap = await bootstrapAdmin(p, ADMIN_KEY, fake.url);
  admin = bootstrap.client;
  const knex = p.runtime.db.knex;
  await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const userId = (await knex('users').where({ is_guest: true }).first()).id as string;
  const key: any = await admin.post('/admin/api-keys', { body: { user_id: userId, name: 'request log', tier: 'enterprise' } });
  user = keyClient(p, key.key);
  ids = { admin: bootstrap.adminId, adminKey: bootstrap.keyId, user: userId, userKey: key.id, provider: bootstrap.providerId };
});

test.after.always(async () => {
  await p?.stop();
  await fake?.close();
});

const find = (query: Record<string, unknown>) => admin.get('/admin/requests', { query }) as Promise<any>;
const rowOf = (requestId: string) => p.runtime.db.knex('llm_request_log').where({ request_id: requestId }).first();
const untilLogged = (requestId: string) => waitFor(async () => ((await rowOf(requestId)) ? true : null), 10_000, `request log row of ${requestId}`);
const rowCount = async () => Number((await p.runtime.db.knex('llm_request_log').count<{ n: string }[]>('* as n').first())?.n);
const requestIdOf = (response: Response) => response.headers.get('x-request-id')!;

test.serial('a chat request is found by its request id with identity, model, provider and tokens', async (t) => {
  const { data, response } = await user.chat.completions.create({ model: 'model-a', messages: [{ role: 'user', content: 'one two three' }] }).withResponse();
  const requestId = requestIdOf(response);
  await untilLogged(requestId);
  const page = await find({ request_id: requestId });
  t.like(page, { object: 'list', has_more: false, total_count: 1 });
  t.like(page.data[0], {
    object: 'request',
    id: requestId,
    route: '/v1/chat/completions',
    aborted: false,
    provider_id: ids.provider,
    created_at: Math.floor(clock.now() / 1000),
    ...chatRecordFields({ userId: ids.user, keyId: ids.userKey }, 'model-a', data.usage!),
  });
  t.is(typeof page.data[0].duration_ms, 'number');
});

test.serial('filters by user and key, newest first, paginated like the other lists', async (t) => {
  let lastId = '';
  for (let i = 0; i < 3; i++) lastId = requestIdOf((await user.models.list().withResponse()).response);
  await untilLogged(lastId);
  const byKey = await find({ key_id: ids.userKey, limit: 2 });
  t.is(byKey.total_count, 4, 'the chat request and three model lists');
  t.is(byKey.data.length, 2);
  t.true(byKey.has_more);
  t.true(byKey.data.every((row: any) => row.key_id === ids.userKey));
  t.is(byKey.data[0].path, '/v1/models', 'newest first');
  const second = await find({ key_id: ids.userKey, limit: 2, offset: 2 });
  t.deepEqual(second.data.map((r: any) => r.id).filter((id: string) => byKey.data.some((r: any) => r.id === id)), [], 'pages do not overlap');
  const byUser = await find({ user_id: ids.user, limit: 100 });
  t.true(byUser.data.length >= 4 && byUser.data.every((row: any) => row.user_id === ids.user));
  const byAdmin = await find({ user_id: ids.admin, limit: 100 });
  t.true(byAdmin.data.length >= 1 && byAdmin.data.every((row: any) => row.key_id === ids.adminKey));
  const none = await find({ request_id: 'no-such-request' });
  t.like(none, { data: [], total_count: 0, has_more: false });
  const bad: any = await admin.get('/admin/requests', { query: { limit: 0 } }).catch((e: unknown) => e);
  t.is(bad.status, 400);
});

test.serial('only admins may read it', async (t) => {
  const error = await user.get('/admin/requests').catch((e) => e);
  t.true(error instanceof PermissionDeniedError);
});

test.serial('the log keeps at most REQUEST_LOG_MAX_ROWS rows and drops rows past the retention window', async (t) => {
  let lastId = '';
  for (let i = 0; i < MAX_ROWS + 5; i++) lastId = requestIdOf((await user.models.list().withResponse()).response);
  await untilLogged(lastId);
  // The row is visible once its batch is inserted; the batch's prune follows, and nothing writes after.
  t.true(await waitFor(async () => ((await rowCount()) === MAX_ROWS ? true : null), 10_000, 'row cap'));
  const oldId = requestIdOf((await user.models.list().withResponse()).response);
  await untilLogged(oldId);
  clock.advance(3 * 3_600_000);
  const newId = requestIdOf((await user.models.list().withResponse()).response);
  await untilLogged(newId);
  const old = await waitFor(async () => ((await rowOf(oldId)) ? null : await find({ request_id: oldId })), 10_000, 'old row pruned');
  t.is(old.total_count, 0);
  const remaining = await p.runtime.db.knex('llm_request_log').min({ at: 'created_at' }).first();
  t.true(new Date(remaining!.at).getTime() >= clock.now() - 2 * 3_600_000);
});
