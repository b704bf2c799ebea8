import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { MAX_MODEL_LIST_PAGES } from '../../../domains/catalog/index.js';
import { modelListClientFor, syncAllProviders, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A provider that pages its model list (`has_more`, as Anthropic's does) is read page by page: a
// sync that saw only the first page would deactivate every model listed on the others. A list
// that cannot be read whole fails the sync, and nothing is deactivated.
let h: LlmHarness;
let upstream: ReturnType<typeof modelListClientFor>;

test.before(async () => {
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
  upstream = modelListClientFor(h.service.runtime.config);
});
test.after.always(async () => {
  await upstream?.close();
  await h?.close();
});

type Pager = (url: URL) => { status?: number; body: unknown };

/** A model-list server answering each request with what `pager` makes of its URL; records the URLs asked. */
async function listServer(t: import('ava').ExecutionContext, pager: { current: Pager }) {
  const asked: string[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    asked.push(req.url!);
    const { status = 200, body } = pager.current(new URL(req.url!, 'http://x'));
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, asked };
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => ({ id: `${prefix}/m${i}` }));

/** Anthropic's shape: `after_id` in, `has_more` and `last_id` out; pages of two. */
const anthropicPages =
  (models: Array<{ id: string }>): Pager =>
  (url) => {
    const after = url.searchParams.get('after_id');
    const start = after === null ? 0 : models.findIndex((m) => m.id === after) + 1;
    const data = models.slice(start, start + 2);
    return { body: { data, has_more: start + 2 < models.length, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null } };
  };

async function activeModels(providerId: string) {
  const rows = await h.service.runtime.db.knex('llm_provider_models').where({ provider_id: providerId }).select('model_public_id', 'active');
  return rows
    .filter((r: any) => r.active)
    .map((r: any) => r.model_public_id)
    .sort();
}

test('a paged list (after_id / last_id) is read whole: every page\'s models are added, none deactivated', async (t) => {
  const pager = { current: anthropicPages(ids('paged', 5)) };
  const { base, asked } = await listServer(t, pager);
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Paged', vendor: 'fake', base_url: base });
  t.is(registered.status, 201, JSON.stringify(registered.body));
  t.deepEqual(registered.body.models.map((m: any) => m.id).sort(), ids('paged', 5).map((m) => m.id));
  t.deepEqual(asked, ['/v1/models', '/v1/models?after_id=paged%2Fm1', '/v1/models?after_id=paged%2Fm3']);

  // A later sync over the same pages changes nothing.
  const summary = await syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), registered.body.id);
  t.like(summary, { synced: [registered.body.id], failed: [], added: 0, deactivated: 0 });
});

test('a paged list without last_id goes on from the last entry with `after`', async (t) => {
  const models = ids('cursor', 3);
  const pager = {
    current: ((url) => {
      const after = url.searchParams.get('after');
      const start = after === null ? 0 : models.findIndex((m) => m.id === after) + 1;
      return { body: { object: 'list', data: models.slice(start, start + 2), has_more: start + 2 < models.length } };
    }) as Pager,
  };
  const { base, asked } = await listServer(t, pager);
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Cursor', vendor: 'fake', base_url: base });
  t.deepEqual(registered.body.models.map((m: any) => m.id).sort(), models.map((m) => m.id));
  t.deepEqual(asked, ['/v1/models', '/v1/models?after=cursor%2Fm1']);
});

test('a list that cannot be read whole fails the sync and deactivates nothing: a failing page, a cursor that does not move, too many pages', async (t) => {
  const models = ids('partial', 4);
  const pager = { current: anthropicPages(models) };
  const { base, asked } = await listServer(t, pager);
  const registered = await h.call('POST', '/v1/admin/providers', { name: 'Partial', vendor: 'fake', base_url: base });
  t.deepEqual(await activeModels(registered.body.id), models.map((m) => m.id));
  const sync = () => syncAllProviders(h.service.ctx, syncDepsFor(h.service.ctx, upstream), registered.body.id);

  const failing: Pager[] = [
    // The second page fails.
    (url) => (url.searchParams.has('after_id') ? { status: 500, body: { error: 'down' } } : anthropicPages(models)(url)),
    // Every page says there is more after the same entry.
    () => ({ body: { data: models.slice(0, 2), has_more: true, last_id: models[1]!.id } }),
    // A new cursor on every page, for ever.
    (url) => {
      const n = Number(url.searchParams.get('after_id')?.split('-')[1] ?? 0) + 1;
      return { body: { data: [{ id: `partial/m0` }], has_more: true, last_id: `page-${n}` } };
    },
  ];
  const pagesAsked: number[] = [];
  for (const current of failing) {
    pager.current = current;
    const before = asked.length;
    const summary = await sync();
    pagesAsked.push(asked.length - before);
    t.deepEqual(summary.synced, []);
    t.regex(summary.failed[0]!.error, /^model sync failed: /);
    t.deepEqual(await activeModels(registered.body.id), models.map((m) => m.id), 'nothing deactivated');
  }
  t.deepEqual(pagesAsked, [2, 2, MAX_MODEL_LIST_PAGES], 'a repeated cursor stops at once; new cursors stop at the page cap');
});
