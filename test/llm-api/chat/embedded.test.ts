import test from 'ava';
import { startEmbeddedPlatform } from '../../helpers/embedded.js';
import { waitFor } from '../../helpers/wait.js';
import { startFakeUpstream } from '../../fakes/openai-upstream.js';

// The embedded defaults of `npm start` (PGlite: one connection; the PostgreSQL-backed queue):
// registration + sync, admin changes, chat (JSON and SSE), store, bulk toggle, the provider-sync
// worker and usage batches all run without a nested query on the single connection.
test('providers, models, chat, store and usage on the embedded defaults (PGlite)', async (t) => {
  const fake = await startFakeUpstream({ name: 'emb', models: [{ id: 'emb/model' }, { id: 'emb/other' }] });
  const embedded = await startEmbeddedPlatform({ LLM_USAGE_FLUSH_MS: '50', REQUEST_LOG_FLUSH_MS: '50' });
  t.teardown(async () => {
    await embedded.stop();
    await fake.close();
  });
  const { platform } = embedded;
  t.is(platform.ctx.runtime.db.driver, 'pglite');
  const knex = platform.ctx.runtime.db.knex;
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await embedded.adminCall(method, path, body);
    const text = await res.text();
    return { status: res.status, text, body: text.startsWith('{') ? JSON.parse(text) : null };
  };

  const reg = await call('POST', '/v1/admin/providers', { name: 'Emb', vendor: 'fake', base_url: fake.url, api_key: 'sk-embedded' });
  t.is(reg.status, 201, reg.text);
  t.is(reg.body.models.length, 2);
  t.is((await call('PATCH', '/v1/admin/models/catalogs/emb/model', { notes: 'n' })).status, 200);
  t.deepEqual((await call('POST', '/v1/admin/models/provider-models/bulk-toggle', { enable: false, except_models: ['emb/model'] })).body, {
    updated_count: 1,
    failed_count: 0,
    skipped_count: 1,
    total_checked: 2,
    failed_models: [],
  });
  const chat = await call('POST', '/v1/chat/completions', { model: 'emb/model', messages: [{ role: 'user', content: 'hi' }], store: true });
  t.is(chat.status, 200, chat.text);
  t.regex(chat.body.conversation.id, /^conv_/);
  const stream = await call('POST', '/v1/chat/completions', { model: 'emb/model', messages: [{ role: 'user', content: 'hi' }], stream: true, store: true, conversation: chat.body.conversation.id });
  t.true(stream.text.endsWith('data: [DONE]\n\n'));
  const sync = await call('POST', `/v1/admin/providers/${reg.body.id}/sync`);
  t.is(sync.status, 200, sync.text);
  t.is((await call('POST', '/v1/admin/providers/sync', {})).status, 202);

  const usageRows = async () => Number((await knex('llm_usage').count<{ count: number }[]>({ count: '*' }))[0]!.count);
  await waitFor(async () => (await usageRows()) >= 2, 30_000, 'two usage rows from the batch writer');
  t.is(await usageRows(), 2);
  const items = await waitFor(async () => {
    const data: any[] = (await call('GET', `/v1/conversations/${chat.body.conversation.id}/items?order=asc`)).body.data;
    return data.length >= 4 && data;
  }, 30_000, 'the streamed turn stored');
  t.is(items.length, 4);

  // The recent-requests log's batch (one JSON parameter expanded in SQL) on PGlite: both chat
  // requests with their route, status and the tokens the fake reported.
  const logged = await waitFor(async () => {
    const rows: any[] = await knex('llm_request_log').where({ path: '/v1/chat/completions' }).orderBy('id');
    return rows.length >= 2 && rows;
  }, 30_000, 'the chat requests in the request log');
  t.is(logged.length, 2);
  for (const row of logged) {
    t.like(row, { method: 'POST', status: 200, aborted: false, model: 'emb/model' });
    t.true(typeof row.request_id === 'string' && row.request_id.length > 0);
    t.true(row.total_tokens > 0 && row.total_tokens === row.prompt_tokens + row.completion_tokens, JSON.stringify(row));
    t.true(row.created_at instanceof Date);
  }
});
