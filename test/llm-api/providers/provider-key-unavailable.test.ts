import test from 'ava';
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
