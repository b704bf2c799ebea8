import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Every provider of a model failed, the first with a 429: the client gets the 429 (it can retry
// after its Retry-After), not the later provider's 502 provider_key_unavailable.
let h: LlmHarness;
let limited: FakeUpstream;
let keyed: FakeUpstream;
const KEY = 'sk-upstream-second-provider-key-4321';

test.before(async () => {
  limited = await startFakeUpstream({ name: 'limited', models: [{ id: 'shared-model' }] });
  keyed = await startFakeUpstream({ name: 'keyed', apiKey: KEY, models: [{ id: 'shared-model' }] });
  h = await startLlmHarness();
  for (const body of [
    { name: 'Limited', vendor: 'fake', base_url: limited.url },
    { name: 'Keyed', vendor: 'fake', base_url: keyed.url, api_key: KEY },
  ]) {
    const reg = await h.call('POST', '/v1/admin/providers', body);
    if (reg.status !== 201) throw new Error(JSON.stringify(reg.body));
  }
});
test.after.always(async () => {
  await h?.close();
  await limited?.close();
  await keyed?.close();
});

test('a 429 from the first provider wins over the second provider\'s provider_key_unavailable', async (t) => {
  // The second provider's stored key altered at rest: it cannot be called.
  const knex = h.service.runtime.db.knex;
  const row = await knex('llm_providers').where({ name: 'Keyed' }).first();
  const parts = String(row.api_key_sealed).split('.');
  const flipped = Buffer.from(parts[3]!, 'base64url');
  flipped[0]! ^= 1;
  await knex('llm_providers').where({ id: row.id }).update({ api_key_sealed: [parts[0], parts[1], parts[2], flipped.toString('base64url')].join('.') });
  t.is((await h.call('PATCH', `/v1/admin/providers/${row.id}`, { metadata: { reloaded: 'yes' } })).status, 200);
  limited.failAll(429, { retryAfter: '7' });

  for (const stream of [false, true]) {
    const res = await h.call('POST', '/v1/chat/completions', { model: 'shared-model', stream, messages: [{ role: 'user', content: 'hi' }] }, h.user);
    t.is(res.status, 429, JSON.stringify(res.body));
    t.like(res.body.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    // The provider asked for 7 s, but the other one did not fail with a rate limit: at most 5 s.
    t.is(res.headers.get('retry-after'), '5');
  }
  t.is(keyed.chatCount(), 0);

  // Without the 429, the last failure is the answer, as before.
  limited.failAll(503);
  const failed = await h.call('POST', '/v1/chat/completions', { model: 'shared-model', messages: [{ role: 'user', content: 'hi' }] }, h.user);
  t.is(failed.status, 502);
  t.is(failed.body.error.code, 'provider_key_unavailable');
});
