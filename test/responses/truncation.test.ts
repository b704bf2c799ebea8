import test from 'ava';
import { MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// `truncation`: with `auto`, a history longer than the model's context window loses its oldest
// items, read newest first; with `disabled` (the default) it is sent whole. The fake provider
// answers whatever it is sent, so what reached it is what the platform chose to send.
let p: ResponsesPlatform;
// 70 stored turns of 13 estimated tokens each, plus the 7 of the request's own input.
const CONTEXT = 7 + 70 * 13;

test.before(async () => {
  p = await startResponsesPlatform();
  const providerModels = await p.api(p.adminKey, 'GET', '/v1/admin/models/provider-models');
  const pm = providerModels.json.data.find((m: any) => m.model_public_id === MODEL);
  const patched = await p.api(p.adminKey, 'PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { context_length: CONTEXT } });
  if (patched.status !== 200) throw new Error(`patch: ${patched.status}`);
});
test.after.always(async () => {
  await p?.stop();
});

/** What the provider was sent for the request whose input holds `marker`. */
const sentFor = (marker: string): any[] => [...p.fake.requests].reverse().find((r) => JSON.stringify(r.body ?? {}).includes(marker))!.body.messages;
const turn = (i: number) => `turn ${String(i).padStart(3, '0')} ${'x'.repeat(27)}`;

test('the model shows the context window requests to it are fitted to', async (t) => {
  const { client } = await p.newClient();
  t.like(await client.models.retrieve(MODEL), { id: MODEL, context_length: CONTEXT } as any);
});

test('auto sends the newest items that fit; disabled sends the whole conversation', async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  for (let i = 0; i < 150; i += 20) {
    const items = Array.from({ length: 20 }, (_, k) => ({ type: 'message' as const, role: (i + k) % 2 ? ('assistant' as const) : ('user' as const), content: turn(i + k) }));
    await client.conversations.items.create(conversation.id, { items: items.slice(0, 150 - i) });
  }
  const auto = await client.responses.create({ model: MODEL, input: 'trim-auto', conversation: conversation.id, truncation: 'auto', tools: [], store: false });
  t.is(auto.truncation, 'auto');
  t.deepEqual(
    sentFor('trim-auto').map((m) => m.content),
    [...Array.from({ length: 70 }, (_, k) => turn(80 + k)), 'trim-auto'],
  );

  const whole = await client.responses.create({ model: MODEL, input: 'trim-off', conversation: conversation.id, tools: [], store: false });
  t.is(whole.truncation, 'disabled');
  t.deepEqual(
    sentFor('trim-off').map((m) => m.content),
    [...Array.from({ length: 150 }, (_, k) => turn(k)), 'trim-off'],
  );
});

test('a cut between a tool call and its output drops the output too', async (t) => {
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({
    items: [
      { type: 'message', role: 'user', content: 'look it up' },
      // Arguments of ~1 000 estimated tokens: the call does not fit, its (newer) output would.
      { type: 'function_call', call_id: 'call_big', name: 'lookup', arguments: JSON.stringify({ q: 'y'.repeat(4000) }) } as any,
      { type: 'function_call_output', call_id: 'call_big', output: 'found it' } as any,
      { type: 'message', role: 'assistant', content: 'it was found' },
    ],
  });
  await client.responses.create({ model: MODEL, input: 'orphan-check', conversation: conversation.id, truncation: 'auto', tools: [], store: false });
  t.deepEqual(
    sentFor('orphan-check').map((m) => [m.role, m.content]),
    [['assistant', 'it was found'], ['user', 'orphan-check']],
  );
});

test('auto trims a chained context too, and what was sent is what the next link continues from', async (t) => {
  const { client } = await p.newClient();
  const first = await client.responses.create({ model: MODEL, input: `chain-1 ${'z'.repeat(4000)}`, tools: [] });
  const answer = first.output_text;
  const second = await client.responses.create({ model: MODEL, input: 'chain-2', previous_response_id: first.id, truncation: 'auto', tools: [] });
  t.deepEqual(
    sentFor('chain-2').map((m) => [m.role, m.content]),
    [['assistant', answer], ['user', 'chain-2']],
  );
  await client.responses.create({ model: MODEL, input: 'chain-3', previous_response_id: second.id, tools: [] });
  t.deepEqual(
    sentFor('chain-3').map((m) => m.role),
    ['assistant', 'user', 'assistant', 'user'],
  );

  const untrimmed = await client.responses.create({ model: MODEL, input: 'chain-2b', previous_response_id: first.id, tools: [] });
  t.is(untrimmed.truncation, 'disabled');
  t.true(String(sentFor('chain-2b')[0].content).startsWith('chain-1 '));
});

test('an unknown truncation is a 400 naming the field', async (t) => {
  const { client } = await p.newClient();
  const error: any = await t.throwsAsync(client.responses.create({ model: MODEL, input: 'x', truncation: 'sometimes' as any }));
  t.is(error.status, 400);
  t.is(error.param, 'truncation');
});
