import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import test from 'ava';
import { PROVIDER_SYNC_QUEUE } from '../../domains/catalog/index.js';
import { llmApiService } from '../../services/llm-api/service.js';
import { startFakeUpstream } from '../fakes/openai-upstream.js';
import { queueConsumers } from '../helpers/amqp.js';
import { startTestService } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startEntryPoint, stackEnv, type Child } from '../helpers/process.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { createTestUser, edgeHeaders } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

// The provider-sync worker runs in its own process and is SIGKILLed in the middle of an on-demand
// sync run (the provider's model list is held by a stalled proxy, so the run is `running` and its
// message unacked). A second worker process gets the message again and finishes the run: the new
// models exist once each and `model.added` is recorded once per model (no duplicate side effect).
const MASTER_KEY = randomBytes(32).toString('hex');
const figures = reliabilityFigures('provider-sync-sigkill');
const row = figures.row('provider-sync worker SIGKILLed mid-run');
test.after.always(() => figures.write());

test('a provider-sync worker SIGKILLed mid-run: the run is redone by the next worker, each new model added once', async (t) => {
  const fake = await startFakeUpstream({ name: 'syncer', models: [{ id: 'first-model' }] });
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: fake.port });
  const svc = await startTestService(llmApiService, { env: { MASTER_KEY, PROVIDER_URL_ALLOW: '127.0.0.1', LLM_PROVIDER_SYNC_INTERVAL_MS: '0', LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  const config = svc.runtime.config;
  const broker = await amqp.connect(config.AMQP_URL!);
  const children: Child[] = [];
  t.teardown(async () => {
    for (const c of children) c.process.kill('SIGKILL');
    await broker.close().catch(() => {});
    await svc.close();
    await proxy.close();
    await fake.close();
  });
  const admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(svc.url + path, { method, headers: { ...edgeHeaders(svc.gatewaySecret, admin), 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };
  const provider = await api('POST', '/v1/admin/providers', { name: 'Syncer', vendor: 'fake', base_url: `http://127.0.0.1:${proxy.port}/v1` });
  t.is(provider.status, 201);

  const worker = () => {
    const child = startEntryPoint(
      'workers/provider-sync/main.ts',
      stackEnv(config, { MASTER_KEY, PROVIDER_URL_ALLOW: '127.0.0.1', LLM_PROVIDER_SYNC_INTERVAL_MS: '0', LLM_MODELS_TIMEOUT_MS: '120000' }),
    );
    children.push(child);
    return child;
  };
  const queue = `${config.BUS_QUEUE_PREFIX}${PROVIDER_SYNC_QUEUE}`;
  const consumers = () => queueConsumers(broker, queue);

  const first = worker();
  await waitFor(async () => (await consumers()) === 1, 60_000, 'first worker consuming');
  fake.setModels([{ id: 'first-model' }, { id: 'second-model' }, { id: 'third-model' }]);
  proxy.stall();
  const queued = await api('POST', '/v1/admin/providers/sync', { provider_id: provider.body.id });
  t.is(queued.status, 202);
  const runId = queued.body.id as string;
  await waitFor(async () => (await api('GET', `/v1/admin/providers/sync/${runId}`)).body.status === 'running', 30_000, 'run started by the first worker');

  first.process.kill('SIGKILL');
  row.faultsInjected++;
  await first.exited;
  proxy.resume();
  worker();
  const finished = await waitFor(async () => {
    const run = (await api('GET', `/v1/admin/providers/sync/${runId}`)).body;
    return run.status === 'succeeded' || run.status === 'failed' ? run : undefined;
  }, 60_000, 'run finished by the second worker');
  t.is(finished.status, 'succeeded');
  t.is(finished.added, 2);

  const models = await svc.runtime.db.knex('llm_provider_models').where({ provider_id: provider.body.id }).select('provider_original_model_id');
  const ids = models.map((m) => m.provider_original_model_id).sort();
  t.deepEqual(ids, ['first-model', 'second-model', 'third-model']);
  const added = await svc.runtime.db.knex('outbox_events').where({ type: 'model.added' }).select('data');
  const addedIds = added.map((e) => (typeof e.data === 'string' ? JSON.parse(e.data) : e.data).model_id as string);
  const once = (id: string) => addedIds.filter((x) => x.includes(id)).length;
  t.is(once('second-model'), 1);
  t.is(once('third-model'), 1);
  row.eventsChecked += addedIds.length;
  row.faultsSurvived++;
});
