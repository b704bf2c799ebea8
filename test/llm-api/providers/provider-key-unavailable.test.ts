import test from 'ava';
import { modelListClientFor, syncAllProviders, syncDepsFor } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A stored provider key that does not decrypt (MASTER_KEY rotated, ciphertext altered) fails the
// chat request closed: the provider is never called without its key.
const SECRET_KEY = 'sk-upstream-secret-key-unavailable-9876';
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'keyed', apiKey: SECRET_KEY, models: [{ id: 'keyed/chat-1' }] });
  h = await startLlmHarness();
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

test('an undecryptable stored key answers 502 provider_key_unavailable and the provider is not called', async (t) => {
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Keyed', vendor: 'keyed', base_url: fake.url, api_key: SECRET_KEY });
  t.is(reg.status, 201);
  const ok = await h.call('POST', '/v1/chat/completions', { model: 'keyed/chat-1', messages: [{ role: 'user', content: 'hi' }] });
  t.is(ok.status, 200);

  // The sealed value altered at rest (as if sealed under another MASTER_KEY): the next catalog load cannot open it.
  const knex = h.service.runtime.db.knex;
  const row = await knex('llm_providers').where({ id: reg.body.id }).first();
  const parts = String(row.api_key_sealed).split('.');
  const flipped = Buffer.from(parts[3]!, 'base64url');
  flipped[0]! ^= 1;
  await knex('llm_providers').where({ id: reg.body.id }).update({ api_key_sealed: [parts[0], parts[1], parts[2], flipped.toString('base64url')].join('.') });
  // Any admin change reloads the in-memory catalog.
  const patched = await h.call('PATCH', `/v1/admin/providers/${reg.body.id}`, { metadata: { reloaded: 'yes' } });
  t.is(patched.status, 200, JSON.stringify(patched.body));

  const chatsBefore = fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length;
  for (const stream of [false, true]) {
    const res = await h.call('POST', '/v1/chat/completions', { model: 'keyed/chat-1', stream, messages: [{ role: 'user', content: 'hi' }] });
    t.is(res.status, 502);
    t.like(res.body.error, { code: 'provider_key_unavailable', type: 'internal_error', param: null });
    t.false(JSON.stringify(res.body).includes(SECRET_KEY));
    t.false(JSON.stringify(res.body).includes(parts[3]!));
  }
  t.is(fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length, chatsBefore, 'the provider was called');
});

test.serial('a model sync of a provider whose stored key does not decrypt says so, fails closed and sends nothing', async (t) => {
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Keyed Sync', vendor: 'keyed', base_url: fake.url, api_key: SECRET_KEY });
  t.is(reg.status, 201, JSON.stringify(reg.body));
  const knex = h.service.runtime.db.knex;
  const row = await knex('llm_providers').where({ id: reg.body.id }).first();
  const parts = String(row.api_key_sealed).split('.');
  const flipped = Buffer.from(parts[3]!, 'base64url');
  flipped[0]! ^= 1;
  await knex('llm_providers').where({ id: reg.body.id }).update({ api_key_sealed: [parts[0], parts[1], parts[2], flipped.toString('base64url')].join('.') });

  const listsBefore = fake.requests.filter((r) => r.path.endsWith('/models')).length;
  const expected = /^model sync failed: the provider's stored API key cannot be decrypted .*nothing was sent; set its api_key again$/;
  // The admin's synchronous sync: still a failure (502), now naming the real reason.
  const now = await h.call('POST', `/v1/admin/providers/${reg.body.id}/sync`);
  t.is(now.status, 502, JSON.stringify(now.body));
  t.regex(now.body.error.message, /^Could not synchronise models: model sync failed: the provider's stored API key cannot be decrypted/);
  t.false(/could not be reached|GET \/models/.test(now.body.error.message), now.body.error.message);
  t.regex((await h.call('GET', `/v1/admin/providers/${reg.body.id}`)).body.last_sync_error, expected);

  // The periodic worker's pass over every provider: the same reason in its summary and its log.
  const upstream = modelListClientFor(h.service.runtime.config);
  t.teardown(() => upstream.close());
  const warned: unknown[] = [];
  const logger = h.service.ctx.runtime.logger;
  const ctx = { ...h.service.ctx, runtime: { ...h.service.ctx.runtime, logger: Object.assign(Object.create(logger), { warn: (...args: unknown[]) => void warned.push(args) }) } };
  const summary = await syncAllProviders(ctx as typeof h.service.ctx, syncDepsFor(h.service.ctx, upstream), reg.body.id);
  t.is(summary.failed.length, 1);
  t.regex(summary.failed[0]!.error, expected);
  t.regex(JSON.stringify(warned), /does not decrypt with this MASTER_KEY; GET \/models was not sent/);
  t.false(JSON.stringify(warned).includes('GET /models failed'));

  t.is(fake.requests.filter((r) => r.path.endsWith('/models')).length, listsBefore, 'a model list was requested');
  t.false(JSON.stringify([now.body, summary, warned]).includes(SECRET_KEY));
});
