import test from 'ava';
import { startFakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness } from '../../fakes/llm-harness.js';

test('usage records wait in memory (batched off the request path) and are all flushed by the service stop', async (t) => {
  const fake = await startFakeUpstream({ name: 'acct', models: [{ id: 'acct-model' }] });
  // The timer would not flush for 10 minutes and a batch needs 10 000 records: only stop() writes.
  const h = await startLlmHarness({ LLM_USAGE_FLUSH_MS: '600000', LLM_USAGE_BATCH_SIZE: '10000' });
  t.teardown(async () => {
    await h.close();
    await fake.close();
  });
  await h.call('POST', '/v1/admin/providers', { name: 'Acct', vendor: 'fake', base_url: fake.url });
  const N = 25;
  const results = await Promise.all(
    Array.from({ length: N }, (_, i) =>
      h.call('POST', '/v1/chat/completions', { model: 'acct-model', messages: [{ role: 'user', content: `n${i}` }], stream: i % 2 === 0 }, h.user),
    ),
  );
  t.true(results.every((r) => r.status === 200));
  const knex = h.service.runtime.db.knex;
  t.is(Number((await knex('llm_usage').count<{ count: number }[]>({ count: '*' }))[0]!.count), 0);
  await h.service.stop();
  const rows = await knex('llm_usage').select('*');
  t.is(rows.length, N);
  t.true(rows.every((r: any) => r.user_id === h.user.id && r.outcome === 'ok' && r.completion_tokens > 0 && r.latency_ms >= 0));
  t.is(rows.filter((r: any) => r.stream).length, Math.ceil(N / 2));
});
