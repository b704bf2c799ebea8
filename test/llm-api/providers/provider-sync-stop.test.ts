import test from 'ava';
import { PROVIDER_SYNC_QUEUE } from '../../../domains/catalog/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { queueDepth } from '../../helpers/amqp.js';
import { startFaultProxy, type FaultProxy } from '../../helpers/fault-proxy.js';
import { waitFor } from '../../helpers/wait.js';

// A graceful stop of the provider-sync worker on RabbitMQ while an on-demand run is in flight: the
// run finishes and its message is acked, not handed back to the queue (where another worker would
// take it and run the same sync a second time).
let h: LlmHarness;
let fake: FakeUpstream;
let proxy: FaultProxy;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'stopsync', models: [{ id: 'one' }] });
  proxy = await startFaultProxy({ host: '127.0.0.1', port: fake.port });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0', PROVIDER_URL_ALLOW: '127.0.0.1' });
});
test.after.always(async () => {
  proxy?.resume();
  await h?.close();
  await proxy?.close();
  await fake?.close();
});

test('a stop during an on-demand run lets the run finish and acks its message', async (t) => {
  t.truthy(h.service.runtime.config.AMQP_URL, 'this test is about RabbitMQ');
  const created = await h.call('POST', '/v1/admin/providers', { name: 'StopSync', vendor: 'fake', base_url: `http://127.0.0.1:${proxy.port}/v1` });
  t.is(created.status, 201);
  const worker = await providerSyncWorker.start(h.service.ctx);
  fake.setModels([{ id: 'one' }, { id: 'two' }]);
  proxy.stall(); // the run waits for the provider's model list
  const req = await h.call('POST', '/v1/admin/providers/sync', { provider_id: created.body.id });
  t.is(req.status, 202);
  const runStatus = async () => (await h.call('GET', `/v1/admin/providers/sync/${req.body.id}`)).body.status as string;
  await waitFor(async () => (await runStatus()) === 'running', 30_000, 'the run to be running');
  // Running is marked before the provider's sync starts: a stop before that hands the run back
  // (queued again), so the stop waits until the model-list request is held at the proxy.
  await waitFor(() => proxy.heldBytes() > 0, 30_000, 'the model-list request to be held');
  const stopped = worker.stop();
  proxy.resume();
  await stopped;
  t.is(await runStatus(), 'succeeded');
  const queue = `${h.service.runtime.config.BUS_QUEUE_PREFIX}${PROVIDER_SYNC_QUEUE}`;
  t.is(await queueDepth(queue), 0, 'the message was acked, not handed back for another worker');
});
