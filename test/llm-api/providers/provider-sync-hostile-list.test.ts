import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { MAX_UPSTREAM_MODELS } from '../../../domains/catalog/index.js';
import { modelListClientFor, syncAllProviders, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A provider's model list is bounded in entries as well as in bytes. Within the 16 MiB byte cap a
// list of bare values (`[0,0,0,…]`, 8 million of them) used to become one skipped-entry record
// each, over a gigabyte of heap in the process running the sync (measured: 1.28 GB), and a list of
// as many ids one catalog entry each. A list longer than MAX_UPSTREAM_MODELS is refused as a
// whole: the sync fails with the generic message, and the provider's models stay as they were
// (none added, none deactivated as vanished). An entry nested deeper than a recursive walk can go
// is one malformed entry: skipped and named, not the end of the provider's sync.
let h: LlmHarness;
let fake: FakeUpstream;
let upstream: ReturnType<typeof modelListClientFor>;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'huge', models: [{ id: 'huge/a' }, { id: 'huge/b' }] });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  upstream = modelListClientFor(h.service.runtime.config);
});
test.after.always(async () => {
  await upstream?.close();
  await h?.close();
  await fake?.close();
});

test('a model list longer than MAX_UPSTREAM_MODELS is refused whole; the provider\'s models stay as they were', async (t) => {
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Huge list', vendor: 'fake', base_url: fake.url });
  t.is(registered.status, 201);
  t.deepEqual(registered.body.models.map((m: any) => m.id).sort(), ['huge/a', 'huge/b']);

  // Entries without an id (the fake makes each value an object): every one would be skipped.
  fake.setModels(Array.from({ length: MAX_UPSTREAM_MODELS + 1 }, () => 0) as any);
  const summary = await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), registered.body.id);
  t.deepEqual(summary.synced, []);
  t.is(summary.failed.length, 1);
  t.regex(summary.failed[0]!.error, /^model sync failed: /);

  const provider = (await h.call('GET', `/v1/admin/providers/${registered.body.id}`)).body;
  t.regex(provider.last_sync_error, /^model sync failed: /);
  const models = await h.service.runtime.db.knex('llm_provider_models').where({ provider_id: registered.body.id }).select('model_public_id', 'active');
  t.deepEqual(models.map((m: any) => [m.model_public_id, m.active]).sort(), [['huge/a', true], ['huge/b', true]]);

  // A list within the bound synchronises as usual.
  fake.setModels([{ id: 'huge/a' }, { id: 'huge/c' }]);
  const next = await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), registered.body.id);
  t.like(next, { synced: [registered.body.id], failed: [], added: 1, deactivated: 1 });
});

test('an entry nested deeper than a stack can walk is skipped and named; the other models are synchronised', async (t) => {
  // 100,000 levels: JSON.parse reads it, but a recursive walk over it (and JSON.stringify) overflows the stack.
  const depth = 100_000;
  const body = `{"object":"list","data":[{"id":"deep/ok"},{"id":"deep/nested","architecture":{"tokenizer":${'['.repeat(depth)}${']'.repeat(depth)}}},{"id":"deep/fine","architecture":{"input_modalities":["text","image"]}}]}`;
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;

  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Deep list', vendor: 'fake', base_url: base });
  t.is(registered.status, 201);
  t.is(registered.body.sync_error, null);
  t.deepEqual(registered.body.models.map((m: any) => m.id).sort(), ['deep/fine', 'deep/ok']);
  t.regex(registered.body.last_sync_error, /^1 model entry skipped: model 'deep\/nested' skipped: architecture /);

  const summary = await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), registered.body.id);
  t.like(summary, { synced: [registered.body.id], failed: [], added: 0, deactivated: 0 });
});
