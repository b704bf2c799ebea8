import test from 'ava';
import { PROVIDER_SYNC_QUEUE } from '../../../domains/catalog/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { queueDepth } from '../../helpers/amqp.js';
import { startFaultProxy, type FaultProxy } from '../../helpers/fault-proxy.js';
import { waitFor } from '../../helpers/wait.js';

// A stop of the provider-sync worker while an on-demand run over every provider is in flight: the
// provider being synchronised finishes, no further provider starts (a stop would otherwise wait for
// the whole pass, far past the consumer's drain, and the broker would hand the message to another
// worker while this one still ran it), and the run goes back to the queue for another worker.
let h: LlmHarness;
let first: FakeUpstream;
let second: FakeUpstream;
let proxy: FaultProxy;

test.before(async () => {
  first = await startFakeUpstream({ name: 'passfirst', models: [{ id: 'pf1' }] });
  second = await startFakeUpstream({ name: 'passsecond', models: [{ id: 'ps1' }] });
  proxy = await startFaultProxy({ host: '127.0.0.1', port: first.port });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0', PROVIDER_URL_ALLOW: '127.0.0.1' });
});
test.after.always(async () => {
  proxy?.resume();
  await h?.close();
  await proxy?.close();
  await first?.close();
  await second?.close();
});

test('a stop during a run over every provider ends after the provider in flight; the run is queued again and another worker finishes it', async (t) => {
  t.truthy(h.service.runtime.config.AMQP_URL, 'this test is about RabbitMQ');
  const a = await h.call('POST', '/v1/admin/providers', { name: 'PassFirst', vendor: 'fake', base_url: `http://127.0.0.1:${proxy.port}/v1` });
  t.is(a.status, 201, JSON.stringify(a.body));
  const b = await h.call('POST', '/v1/admin/providers', { name: 'PassSecond', vendor: 'fake', base_url: second.url });
  t.is(b.status, 201, JSON.stringify(b.body));
  const listedSecond = () => second.requests.filter((r) => r.path.endsWith('/models')).length;
  const secondBefore = listedSecond();

  const worker = await providerSyncWorker.start(h.service.ctx);
  first.setModels([{ id: 'pf1' }, { id: 'pf2' }]);
  second.setModels([{ id: 'ps1' }, { id: 'ps2' }]);
  proxy.stall(); // the run waits for the first provider's model list
  const req = await h.call('POST', '/v1/admin/providers/sync', {});
  t.is(req.status, 202);
  const view = async () => (await h.call('GET', `/v1/admin/providers/sync/${req.body.id}`)).body;
  await waitFor(async () => (await view()).status === 'running', 30_000, 'the run to be running');
  const stopped = worker.stop();
  proxy.resume();
  await stopped;

  t.is(listedSecond(), secondBefore, 'no provider started after the stop');
  t.like(await view(), { status: 'queued', error: 'interrupted by a worker stop; retrying' });
  const queue = `${h.service.runtime.config.BUS_QUEUE_PREFIX}${PROVIDER_SYNC_QUEUE}`;
  t.is(await queueDepth(queue), 1, 'the message went back to the queue');

  const next = await providerSyncWorker.start(h.service.ctx);
  try {
    const done = await waitFor(async () => {
      const current = await view();
      return current.status === 'succeeded' || current.status === 'failed' ? current : undefined;
    }, 30_000, 'another worker to finish the run');
    t.like(done, { status: 'succeeded', providers_synced: 2, providers_failed: 0, error: null });
    t.true(listedSecond() > secondBefore);
  } finally {
    await next.stop();
  }
});
