import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { startTestService, type TestService } from '../../helpers/env.js';
import { createTestUser } from '../../helpers/users.js';
import { clientFor, type Client } from '../conversations/client.js';

let svc: TestService;
let alice: Client;
let bob: Client;
const clock = new ManualClock(Date.UTC(2026, 11, 7, 3, 0, 0));

test.before(async () => {
  svc = await startTestService(llmApiService, { clock });
  alice = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  bob = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
});
test.after.always(() => svc?.close());

test.serial('a patch that changes nothing keeps updated_at and the project where it is in the list', async (t) => {
  const carol = clientFor(svc.url, svc.gatewaySecret, await createTestUser(svc.runtime.db.knex));
  const first = (await carol.post('/v1/projects', { name: 'First', instruction: 'keep' })).body;
  await carol.patch(`/v1/projects/${first.id}`, { is_favorite: true, is_archived: true });
  const second = (await carol.post('/v1/projects', { name: 'Second' })).body;
  const before = (await carol.get(`/v1/projects/${first.id}`)).body;
  clock.advance(60_000);
  for (const body of [{}, { name: 'First', instruction: 'keep' }, { is_favorite: true }, { is_archived: true }]) {
    const r = await carol.patch(`/v1/projects/${first.id}`, body);
    t.is(r.status, 200, JSON.stringify(r.body));
    t.deepEqual(r.body, before, JSON.stringify(body));
  }
  t.deepEqual((await carol.get('/v1/projects')).body.data.map((p: any) => p.id), [second.id, first.id]);
  // A real change still counts as activity.
  const renamed = await carol.patch(`/v1/projects/${first.id}`, { name: 'First!', is_favorite: true });
  t.is(renamed.body.updated_at, Math.floor(clock.now() / 1000));
  t.is(renamed.body.archived_at, before.archived_at);
  t.deepEqual((await carol.get('/v1/projects')).body.data.map((p: any) => p.id), [first.id, second.id]);
});

test('another user cannot link, list or unlink conversations through a project that is not theirs (404)', async (t) => {
  const project = (await alice.post('/v1/projects', { name: 'Mine' })).body;
  const linked = (await alice.post('/v1/conversations', { project_id: project.id })).body;
  const create = await bob.post('/v1/conversations', { project_id: project.id });
  t.is(create.status, 404);
  t.like(create.body.error, { type: 'not_found_error', param: 'project_id' });
  const own = (await bob.post('/v1/conversations', {})).body;
  t.is((await bob.patch(`/v1/conversations/${own.id}`, { project_id: project.id })).status, 404);
  t.is((await bob.get(`/v1/conversations?project_id=${project.id}`)).body.total_count, 0);
  t.is((await bob.del(`/v1/projects/${project.id}`)).status, 404);
  t.is((await bob.patch(`/v1/projects/${project.id}`, { is_archived: true })).status, 404);
  const after = await alice.get(`/v1/projects/${project.id}`);
  t.false(after.body.is_archived);
  t.is((await alice.get(`/v1/conversations/${linked.id}`)).body.project_id, project.id, 'the link stays');
});
