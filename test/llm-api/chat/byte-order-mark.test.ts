import test from 'ava';
import { parseJsonText } from '../../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A JSON body that starts with a UTF-8 byte order mark (EF BB BF), as "UTF-8 with BOM" editors and
// some Windows tools write it: RFC 8259 lets a parser ignore the mark, and every JSON route does.
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'bom', models: [{ id: 'bom/chat-1' }] });
  h = await startLlmHarness();
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Bom', vendor: 'bom', base_url: fake.url });
  if (reg.status !== 201) throw new Error(JSON.stringify(reg.body));
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

async function postWithBom(path: string, value: unknown) {
  const res = await fetch(h.url + path, {
    method: 'POST',
    headers: { ...h.headers(h.user), 'content-type': 'application/json' },
    body: Buffer.concat([BOM, Buffer.from(JSON.stringify(value))]),
  });
  const text = await res.text();
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch {
    // an event stream
  }
  return { status: res.status, body };
}

test('a chat completion whose body starts with a byte order mark is answered, and the provider gets plain JSON', async (t) => {
  for (const stream of [false, true]) {
    const before = fake.requests.length;
    const res = await postWithBom('/v1/chat/completions', { model: 'bom/chat-1', stream, messages: [{ role: 'user', content: `with a mark ${stream}` }] });
    t.is(res.status, 200, JSON.stringify(res.body));
    const sent = fake.requests.slice(before).find((r) => r.path.endsWith('/chat/completions'));
    t.truthy(sent);
    // The forwarded messages are the bytes that arrived (after the mark): the provider parsed them.
    t.is(sent!.body.messages[0].content, `with a mark ${stream}`);
    t.false(sent!.raw.startsWith('\ufeff'));
  }
});

test('another JSON route (a new conversation) takes a body with a byte order mark too', async (t) => {
  const res = await postWithBom('/v1/conversations', { metadata: { topic: 'marked' } });
  t.is(res.status, 200, JSON.stringify(res.body));
  t.deepEqual(res.body.metadata, { topic: 'marked' });
});

test('the mark is ignored only at the start: one anywhere else is still malformed JSON', async (t) => {
  t.deepEqual(parseJsonText('\ufeff{"a":1}', { bytes: Buffer.from('\ufeff{"a":1}') }), { a: 1 });
  t.deepEqual(parseJsonText('\ufeff[1,2]'), [1, 2]);
  const twice = await fetch(h.url + '/v1/conversations', {
    method: 'POST',
    headers: { ...h.headers(h.user), 'content-type': 'application/json' },
    body: Buffer.concat([BOM, BOM, Buffer.from('{}')]),
  });
  t.is(twice.status, 400);
  const answer = (await twice.json()) as { error: { param: string; message: string } };
  t.is(answer.error.param, 'body');
  t.regex(answer.error.message, /^Malformed JSON in request body: Unexpected token in JSON at position 0$/);
});
