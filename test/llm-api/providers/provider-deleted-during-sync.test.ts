import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A provider deleted by an administrator while its model sync runs. The race is driven from the
// upstream's side: its `GET /v1/models` handler deletes the provider (through the admin API) before
// it answers, so the sync's write finds no provider row.
let h: LlmHarness;
let server: http.Server;
let upstreamUrl: string;
/** Runs inside `GET /v1/models`, before the answer is sent. */
let beforeModels: () => Promise<void> = async () => {};

test.before(async () => {
  server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/v1/models') {
      res.writeHead(404).end();
      return;
    }
    beforeModels().then(
      () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'gone/model', object: 'model', created: 1700000000, owned_by: 'gone' }] }));
      },
      (error: Error) => res.writeHead(500).end(error.message),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await h?.close();
  await new Promise<void>((resolve) => server?.close(() => resolve()));
});
test.afterEach.always(() => {
  beforeModels = async () => {};
});

const deleteByName = async (name: string) => {
  const row = await h.service.runtime.db.knex('llm_providers').where({ name }).first();
  if (!row) throw new Error(`no provider named ${name}`);
  const r = await h.call('DELETE', `/v1/admin/providers/${row.id}?force=true`);
  if (r.status !== 200) throw new Error(`delete: ${r.status} ${JSON.stringify(r.body)}`);
};

test.serial('a provider deleted while its registration syncs its models: 409 provider_deleted naming it, not a 500', async (t) => {
  let deleted = false;
  beforeModels = async () => {
    await deleteByName('Vanishing');
    deleted = true;
  };
  const r = await h.call('POST', '/v1/admin/providers', { name: 'Vanishing', vendor: 'gone', base_url: upstreamUrl });
  t.true(deleted);
  t.is(r.status, 409, JSON.stringify(r.body));
  t.is(r.body.error.code, 'provider_deleted');
  t.regex(r.body.error.message, /Vanishing/);
  t.is(await h.service.runtime.db.knex('llm_providers').where({ name: 'Vanishing' }).first(), undefined);
});

test.serial('a provider deleted during POST /v1/admin/providers/{id}/sync: 404 naming it, not a 502', async (t) => {
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Short-lived', vendor: 'gone', base_url: upstreamUrl });
  t.is(registered.status, 201, JSON.stringify(registered.body));
  const id = registered.body.id as string;
  beforeModels = () => deleteByName('Short-lived');
  const r = await h.call('POST', `/v1/admin/providers/${id}/sync`);
  t.is(r.status, 404, JSON.stringify(r.body));
  t.true(r.body.error.message.includes(id), r.body.error.message);
  t.false(/does not exist/.test(r.body.error.message));
});
