import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// The admin view of a provider's endpoints: the administrative switch (`enabled`) and the live
// health (`healthy`) apart, so a view sent back as a PATCH never stores a cool-down as "off"; and a
// base URL change on a provider routed through its endpoints is refused rather than ignored.
let h: LlmHarness;
const fakes: FakeUpstream[] = [];
const fake = async (name: string, models: string[]) => {
  const f = await startFakeUpstream({ name, models: models.map((id) => ({ id })) });
  fakes.push(f);
  return f;
};

test.before(async () => {
  // No probe: an endpoint in a cool-down stays there for the whole test.
  h = await startLlmHarness({ LLM_HEALTH_FAILURE_THRESHOLD: '1', LLM_HEALTH_COOLDOWN_MS: '600000', LLM_HEALTH_PROBE_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await h?.close();
  for (const f of fakes) await f.close();
});

const chat = (model: string) => h.call('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] }, h.user);
const storedEndpoints = async (id: string) => (await h.service.runtime.db.knex('llm_providers').where({ id }).first()).endpoints;

test.serial('the view reports the switch and the live health apart; a view sent back keeps the switches', async (t) => {
  const first = await fake('first', ['sw-model']);
  const second = await fake('second', ['sw-model']);
  const third = await fake('third', ['sw-model']);
  const reg = await h.call('POST', '/v1/admin/providers', {
    name: 'Switches',
    vendor: 'fake',
    endpoints: [
      { url: first.url, priority: 0 },
      { url: second.url, priority: 1 },
      { url: third.url, priority: 2, enabled: false },
    ],
  });
  t.is(reg.status, 201, JSON.stringify(reg.body));
  const id = reg.body.id;
  t.deepEqual(
    reg.body.endpoints.map((e: any) => [e.enabled, e.healthy]),
    [[true, true], [true, true], [false, true]],
  );

  // The first endpoint fails once (threshold 1): a cool-down, not an administrative "off".
  await first.down();
  const answered = await chat('sw-model');
  t.is(answered.status, 200);
  const view = (await h.call('GET', `/v1/admin/providers/${id}`)).body;
  t.deepEqual(view.endpoints.map((e: any) => [e.url, e.enabled, e.healthy]), [
    [first.url, true, false],
    [second.url, true, true],
    [third.url, false, true],
  ]);

  // Read, change one weight, send the whole list back: the switches stay as they were.
  const endpoints = view.endpoints.map((e: any, i: number) => (i === 1 ? { ...e, weight: 5 } : e));
  const patched = await h.call('PATCH', `/v1/admin/providers/${id}`, { endpoints });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.deepEqual(
    (await storedEndpoints(id)).map((e: any) => [e.url, e.healthy, e.weight]),
    [
      [first.url, true, 1],
      [second.url, true, 5],
      [third.url, false, 1],
    ],
  );

  // `healthy` alone is still the switch's older name.
  const legacy = await h.call('PATCH', `/v1/admin/providers/${id}`, { endpoints: [{ url: first.url, healthy: false }, { url: second.url }] });
  t.is(legacy.status, 200);
  t.deepEqual(legacy.body.endpoints.map((e: any) => e.enabled), [false, true]);
});

test.serial('PATCH base_url (or url) of a provider routed through its endpoints is a 400 naming it', async (t) => {
  const a = await fake('a', ['bu-model']);
  const b = await fake('b', ['bu-model']);
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'WithEndpoints', vendor: 'fake', endpoints: [{ url: a.url }] });
  t.is(reg.status, 201);
  const id = reg.body.id;

  for (const field of ['base_url', 'url']) {
    const refused = await h.call('PATCH', `/v1/admin/providers/${id}`, { [field]: b.url });
    t.is(refused.status, 400, field);
    t.is(refused.body.error.param, field);
    t.regex(refused.body.error.message, /edit endpoints/);
  }
  const after = (await h.call('GET', `/v1/admin/providers/${id}`)).body;
  t.is(after.base_url, a.url);
  t.deepEqual(after.endpoints.map((e: any) => e.url), [a.url]);
  // The same base URL is no change; with endpoints in the same request it is accepted.
  t.is((await h.call('PATCH', `/v1/admin/providers/${id}`, { base_url: a.url })).status, 200);
  const both = await h.call('PATCH', `/v1/admin/providers/${id}`, { base_url: b.url, endpoints: [{ url: b.url }] });
  t.is(both.status, 200);
  t.deepEqual(both.body.endpoints.map((e: any) => e.url), [b.url]);
  const before = b.chatCount();
  t.is((await chat('bu-model')).status, 200);
  t.is(b.chatCount(), before + 1);

  // A provider registered with a base URL only (no endpoints configured) follows a new base URL.
  const c = await fake('c', ['plain-model']);
  const d = await fake('d', ['plain-model']);
  const plain = await h.call('POST', '/v1/admin/providers', { name: 'Plain', vendor: 'fake', base_url: c.url });
  const moved = await h.call('PATCH', `/v1/admin/providers/${plain.body.id}`, { base_url: d.url });
  t.is(moved.status, 200);
  t.deepEqual(moved.body.endpoints.map((e: any) => e.url), [d.url]);
  const dBefore = d.chatCount();
  t.is((await chat('plain-model')).status, 200);
  t.is(d.chatCount(), dBefore + 1);
});
