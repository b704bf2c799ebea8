import test from 'ava';
import OpenAI, { NotFoundError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { noisePng, solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// Media in chat, through the edge with the openai SDK: `jan_` references are resolved by llm-api
// calling media-api directly (never the edge) before the request goes upstream; with
// `store: true`, inline images are uploaded as media and the stored item holds the reference.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: MediaPlatform;
let fake: FakeUpstream;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'vision', models: [{ id: 'vision-model' }] });
  p = await startMediaPlatform({ BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' });
  const res = await postJson(`${p.url}/v1/admin/providers`, { 'x-api-key': ADMIN_KEY }, { name: 'Vision', vendor: 'fake', base_url: fake.url });
  if (res.status !== 201) throw new Error(`provider: ${res.status} ${JSON.stringify(res.body)}`);
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
});

const clientFor = (headers: Record<string, string>) =>
  new OpenAI({ baseURL: `${p.url}/v1`, apiKey: headers.authorization!.slice('Bearer '.length), maxRetries: 0 });
const sentTo = (marker: string) => fake.requests.filter((r) => r.path.endsWith('/chat/completions') && JSON.stringify(r.body).includes(marker));

test('a jan_ reference (bare id or data: placeholder) reaches the upstream as a download URL', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 8, 8, 71);
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
  const client = clientFor(user.headers);
  const answer = await client.chat.completions.create({
    model: 'vision-model',
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'ref-marker-1 what is this?' },
          { type: 'image_url', image_url: { url: up.body.id } },
          { type: 'image_url', image_url: { url: `data:image/png;${up.body.id}` } },
        ],
      },
    ],
  });
  t.truthy(answer.choices[0]!.message.content);
  const [sent] = sentTo('ref-marker-1');
  t.truthy(sent);
  const parts = sent!.body.messages[0].content;
  for (const part of parts.slice(1)) {
    t.regex(part.image_url.url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/media\/signed\/objects\//);
    const image = await fetch(part.image_url.url);
    t.is(image.status, 200);
    t.is(image.headers.get('content-type'), 'image/png');
  }
  t.false(JSON.stringify(sent!.body).includes('jan_'), 'no reference left for the provider');
});

test('a reference the caller does not own is a 404 naming it, and nothing goes upstream', async (t) => {
  const owner = await p.newUser();
  const other = await p.newUser();
  const up = await postJson(`${p.url}/v1/media/upload`, owner.headers, { source: { type: 'base64', data: (await solidImage('png', 8, 8, 72)).toString('base64') } });
  const error = await t.throwsAsync(
    clientFor(other.headers).chat.completions.create({
      model: 'vision-model',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'ref-marker-2' }, { type: 'image_url', image_url: { url: up.body.id } }] }],
    }),
  );
  t.true(error instanceof NotFoundError, String(error));
  t.true((error as NotFoundError).message.includes(up.body.id));
  t.is(sentTo('ref-marker-2').length, 0);
});

test('store: true with a base64 image stores a jan_ reference, never the base64', async (t) => {
  const user = await p.newUser();
  const image = await noisePng(96, 96); // ~27 KB of incompressible pixels
  const dataUrl = `data:image/png;base64,${image.toString('base64')}`;
  const client = clientFor(user.headers);
  const res: any = await client.chat.completions.create({
    model: 'vision-model',
    store: true,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'ref-marker-3 describe' }, { type: 'image_url', image_url: { url: dataUrl } }] }],
  } as any);
  t.regex(res.conversation.id, /^conv_/);
  // The provider got the image (as sent).
  t.is(sentTo('ref-marker-3')[0]!.body.messages[0].content[1].image_url.url, dataUrl);

  const items = await (await fetch(`${p.url}/v1/conversations/${res.conversation.id}/items?order=asc`, { headers: user.headers })).json() as any;
  const stored = items.data.find((i: any) => i.role === 'user');
  const imagePart = stored.content.find((c: any) => c.type === 'input_image');
  t.regex(imagePart.image_url, /^data:image\/png;jan_[0-9a-z]{26}$/);
  const serialized = JSON.stringify(items);
  t.false(serialized.includes(image.toString('base64').slice(0, 64)), 'no base64 in the conversation');
  t.true(serialized.length < 4096, `the conversation stays small (${serialized.length} bytes for a ${image.length}-byte image)`);

  // The reference is the user's media, and it resolves.
  const id = imagePart.image_url.split(';')[1];
  const media = await (await fetch(`${p.url}/v1/media/${id}`, { headers: user.headers })).json() as any;
  t.like(media, { id, mime_type: 'image/png', width: 96, height: 96 });
  const again = await client.chat.completions.create({
    model: 'vision-model',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'ref-marker-4' }, { type: 'image_url', image_url: { url: imagePart.image_url } }] }],
  });
  t.truthy(again.id);
  t.regex(sentTo('ref-marker-4')[0]!.body.messages[0].content[1].image_url.url, /\/v1\/media\/signed\//);
});

test('a later turn replays the stored images: inline (stored as data:…;jan_) and bare jan_ ids reach the upstream as download URLs', async (t) => {
  const user = await p.newUser();
  const client = clientFor(user.headers);
  const inline = `data:image/png;base64,${(await noisePng(32, 32)).toString('base64')}`;
  const uploaded = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 8, 8, 73)).toString('base64') } });
  t.is(uploaded.status, 201, JSON.stringify(uploaded.body));
  const first: any = await client.chat.completions.create({
    model: 'vision-model',
    store: true,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'turn-marker-1 compare these' },
          { type: 'image_url', image_url: { url: inline } },
          { type: 'image_url', image_url: { url: uploaded.body.id, detail: 'low' } },
        ],
      },
    ],
  } as any);
  const conversation = first.conversation.id;
  await client.chat.completions.create({ model: 'vision-model', store: true, conversation, messages: [{ role: 'user', content: 'turn-marker-2 and now?' }] } as any);

  const [second] = sentTo('turn-marker-2');
  t.truthy(second);
  const history = second!.body.messages;
  t.deepEqual(history.map((m: any) => m.role), ['user', 'assistant', 'user']);
  const replayed = history[0].content;
  t.deepEqual(replayed.map((part: any) => part.type), ['text', 'image_url', 'image_url']);
  t.is(replayed[0].text, 'turn-marker-1 compare these');
  t.is(replayed[2].image_url.detail, 'low');
  for (const part of replayed.slice(1)) {
    t.regex(part.image_url.url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/media\/signed\/objects\//);
    const image = await fetch(part.image_url.url);
    t.is(image.status, 200);
    t.is(image.headers.get('content-type'), 'image/png');
  }
  t.false(JSON.stringify(second!.body).includes('jan_'), 'no reference left for the provider');
  t.is(history[2].content, 'turn-marker-2 and now?');
});

test('a later turn whose history names media deleted since is refused as a first turn would be: 404 naming it, nothing upstream', async (t) => {
  // Replayed references resolve exactly like new ones, so a deleted image is reported instead of
  // silently leaving the model without it.
  const user = await p.newUser();
  const client = clientFor(user.headers);
  const uploaded = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 8, 8, 74)).toString('base64') } });
  const first: any = await client.chat.completions.create({
    model: 'vision-model',
    store: true,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'gone-marker-1' }, { type: 'image_url', image_url: { url: uploaded.body.id } }] }],
  } as any);
  const removed = await fetch(`${p.url}/v1/media/${uploaded.body.id}`, { method: 'DELETE', headers: user.headers });
  t.true(removed.status === 200 || removed.status === 204, `delete answered ${removed.status}`);
  const error = await t.throwsAsync(client.chat.completions.create({ model: 'vision-model', conversation: first.conversation.id, messages: [{ role: 'user', content: 'gone-marker-2' }] } as any));
  t.true(error instanceof NotFoundError, String(error));
  t.true((error as NotFoundError).message.includes(uploaded.body.id));
  t.is(sentTo('gone-marker-2').length, 0);
});
