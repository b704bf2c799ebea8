import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// Chat content parts (docs/llm.md, "Content parts"): the known part types are checked field by field
// as OpenAI does, a 400 naming the exact path before any provider is asked or anything is stored;
// a part type the platform does not know passes through to the provider as it came.
let h: LlmHarness;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'parts', models: [{ id: 'parts-model' }] });
  h = await startLlmHarness();
  await h.call('POST', '/v1/admin/providers', { name: 'Parts', vendor: 'fake', base_url: fake.url });
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const sentTo = (marker: string) => fake.requests.filter((r) => JSON.stringify(r.body ?? {}).includes(marker));
const chat = (messages: unknown[], extra: Record<string, unknown> = {}) => h.call('POST', '/v1/chat/completions', { model: 'parts-model', messages, ...extra }, h.user);
const text = (marker: string) => ({ type: 'text', text: marker });

test('a known part with a wrong or missing field is a 400 naming its path; nothing reaches the provider', async (t) => {
  const cases: Array<[string, unknown[], string]> = [
    ['text-number', [{ role: 'user', content: [{ type: 'text', text: 5 }] }], 'messages[0].content[0].text'],
    ['text-missing', [{ role: 'user', content: [{ type: 'text' }] }], 'messages[0].content[0].text'],
    ['user-empty', [{ role: 'user', content: [] }], 'messages[0].content'],
    ['system-empty', [{ role: 'system', content: [] }, { role: 'user', content: 'x' }], 'messages[0].content'],
    ['url-number', [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 7 } }] }], 'messages[0].content[0].image_url.url'],
    ['url-missing', [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }], 'messages[0].content[0].image_url.url'],
    ['image-missing', [{ role: 'user', content: [{ type: 'image_url' }] }], 'messages[0].content[0].image_url'],
    ['image-string', [{ role: 'user', content: [{ type: 'image_url', image_url: 'https://img.example/a.png' }] }], 'messages[0].content[0].image_url'],
    ['detail', [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://img.example/a.png', detail: 'ultra' } }] }], 'messages[0].content[0].image_url.detail'],
    ['audio-missing', [{ role: 'user', content: [{ type: 'input_audio' }] }], 'messages[0].content[0].input_audio'],
    ['audio-data', [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 1, format: 'wav' } }] }], 'messages[0].content[0].input_audio.data'],
    ['audio-format', [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA' } }] }], 'messages[0].content[0].input_audio.format'],
    ['file-missing', [{ role: 'user', content: [{ type: 'file' }] }], 'messages[0].content[0].file'],
    ['file-id', [{ role: 'user', content: [{ type: 'file', file: { file_id: 3 } }] }], 'messages[0].content[0].file.file_id'],
    ['file-name', [{ role: 'user', content: [{ type: 'file', file: { file_data: 'data:application/pdf;base64,AAAA', filename: [] } }] }], 'messages[0].content[0].file.filename'],
    ['file-empty', [{ role: 'user', content: [{ type: 'file', file: {} }] }], 'messages[0].content[0].file'],
    ['refusal', [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'refusal', refusal: null }] }, { role: 'user', content: 'x' }], 'messages[1].content[0].refusal'],
    ['second-part', [{ role: 'user', content: [{ type: 'text', text: 'ok' }, { type: 'text', text: { nested: true } }] }], 'messages[0].content[1].text'],
    ['part-not-object', [{ role: 'user', content: ['just a string'] }], 'messages[0].content[0]'],
  ];
  for (const [marker, messages, param] of cases) {
    const tagged = [{ role: 'system', content: `marker-${marker}` }, ...messages];
    const res = await chat(tagged);
    const shifted = param.replace(/^messages\[(\d+)\]/, (_, i) => `messages[${Number(i) + 1}]`);
    t.is(res.status, 400, marker);
    t.is(res.body.error.type, 'invalid_request_error', marker);
    t.is(res.body.error.param, shifted, marker);
    t.is(typeof res.body.error.message, 'string', marker);
    t.true(res.body.error.message.includes(shifted), `${marker}: ${res.body.error.message}`);
    t.is(sentTo(`marker-${marker}`).length, 0, `${marker} reached the provider`);
  }
});

test('a refused part is not stored in the conversation', async (t) => {
  const conversation = (await h.call('POST', '/v1/conversations', {}, h.user)).body;
  t.truthy(conversation.id);
  const res = await chat([{ role: 'user', content: [{ type: 'text', text: 'store-refused' }, { type: 'image_url', image_url: { url: 7 } }] }], { store: true, conversation: { id: conversation.id } });
  t.is(res.status, 400);
  t.is(res.body.error.param, 'messages[0].content[1].image_url.url');
  const items = (await h.call('GET', `/v1/conversations/${conversation.id}/items`, undefined, h.user)).body.data;
  t.deepEqual(items, []);
  t.is(sentTo('store-refused').length, 0);
});

test('well-formed parts of each known type and parts of unknown types reach the provider as sent', async (t) => {
  const messages = [
    { role: 'system', content: [text('sys-ok-marker')] },
    {
      role: 'user',
      content: [
        text('parts-ok-marker'),
        { type: 'image_url', image_url: { url: 'https://img.example/a.png' } },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
        { type: 'image_url', image_url: { url: 'https://img.example/b.png', detail: 'auto', extra_hint: 1 } },
        { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
        { type: 'file', file: { file_id: 'file-abc' } },
        { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' } },
        // vLLM's video part and a made-up one: the platform does not know them, the provider may.
        { type: 'video_url', video_url: { url: 'https://video.example/v.mp4' } },
        { type: 'future_part', anything: [1, { deep: true }] },
      ],
    },
    { role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }, text('but here')] },
    { role: 'user', content: [text('again'), { type: 'image_url', image_url: { url: 'https://img.example/c.png', detail: 'high' } }] },
  ];
  const res = await chat(messages);
  t.is(res.status, 200, JSON.stringify(res.body));
  const sent = sentTo('parts-ok-marker');
  t.is(sent.length, 1);
  t.deepEqual(sent[0]!.body.messages, messages);
});

test('an assistant message with tool calls may keep an empty parts array', async (t) => {
  const messages = [
    { role: 'user', content: 'tool-empty-marker' },
    { role: 'assistant', content: [], tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: [text('result')] },
  ];
  const res = await chat(messages);
  t.is(res.status, 200, JSON.stringify(res.body));
  t.deepEqual(sentTo('tool-empty-marker')[0]!.body.messages, messages);
});
