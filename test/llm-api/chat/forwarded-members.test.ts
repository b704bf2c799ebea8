import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A chat request's messages and tools reach the provider as the bytes the client sent, not
// serialised again, whenever those bytes say exactly what the gateway validated.
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'main', models: [{ id: 'chat-model' }] });
  h = await startLlmHarness();
  await h.call('POST', '/v1/admin/providers', { name: 'Main', vendor: 'fake', base_url: fake.url });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

/** Posts `text` as it is and returns the status and what the provider received for it (found by `marker`). */
async function send(text: string, marker: string) {
  const res = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { ...h.headers(h.user), 'content-type': 'application/json' }, body: text });
  const answer = (await res.json()) as any;
  const received = fake.requests.find((r) => r.raw.includes(marker));
  return { status: res.status, answer, received };
}

test('messages and tools go on as they were written; the rest is the gateway\'s', async (t) => {
  const messages = '[ {"role" : "user", "content" : "fwd-1 \\u00e9t\\u00e9 — ✓ \\"quoted\\""} ]';
  const tools = '[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}]';
  const { status, received } = await send(`{"model":"chat-model","messages":${messages},"tools":${tools},"max_tokens":7,"store":false}`, 'fwd-1');
  t.is(status, 200);
  t.true(received!.raw.includes(`"messages":${messages}`), received!.raw);
  t.true(received!.raw.includes(`"tools":${tools}`), received!.raw);
  t.is(received!.body.model, 'chat-model');
  t.is(received!.body.max_completion_tokens, 7);
  t.false('max_tokens' in received!.body);
  t.false('store' in received!.body);
  t.is(received!.body.messages[0].content, 'fwd-1 été — ✓ "quoted"');
});

test('with a name given twice the provider gets what was validated: the last, serialised again', async (t) => {
  const { status, received } = await send('{"model":"chat-model","messages":[{"role":"user","content":"fwd-2 first"}],"messages":[{"role":"user","content":"fwd-2 second"}]}', 'fwd-2');
  t.is(status, 200);
  t.deepEqual(received!.body.messages, [{ role: 'user', content: 'fwd-2 second' }]);
  t.false(received!.raw.includes('fwd-2 first'));
});

test('a name spelt with an escape is the same name: what was validated goes on', async (t) => {
  const { status, received } = await send('{"model":"chat-model","messages":[{"role":"user","content":"fwd-3 first"}],"messag\\u0065s":[{"role":"user","content":"fwd-3 second"}]}', 'fwd-3');
  t.is(status, 200);
  t.deepEqual(received!.body.messages, [{ role: 'user', content: 'fwd-3 second' }]);
});

test('bytes that are not UTF-8 are refused, not replaced: nothing reaches the provider', async (t) => {
  const body = Buffer.concat([Buffer.from('{"model":"chat-model","messages":[{"role":"user","content":"fwd-4 '), Buffer.from([0xc3, 0x28]), Buffer.from('"}]}')]);
  const res = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { ...h.headers(h.user), 'content-type': 'application/json' }, body });
  t.is(res.status, 400);
  const answer = (await res.json()) as any;
  t.like(answer.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'body', message: 'The request body is not valid UTF-8' });
  t.falsy(fake.requests.find((r) => r.raw.includes('fwd-4')));
});

test('messages the gateway refuses are refused whatever their bytes', async (t) => {
  const { status, answer } = await send('{"model":"chat-model","messages":[{"role":"user","content":"fwd-5 \\u0000"}]}', 'fwd-5');
  t.is(status, 400);
  t.is(answer.error.param, 'messages[0].content');
  t.falsy(fake.requests.find((r) => r.raw.includes('fwd-5')));
});
