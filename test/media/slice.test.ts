import test from 'ava';
import sharp from 'sharp';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

test('upload (base64) → get → content → list → delete through the edge, filesystem driver', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 30, 20, 1);
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') }, filename: 'dot.png' });
  t.is(up.status, 201, JSON.stringify(up.body));
  t.regex(up.body.id, /^jan_[0-9a-z]{26}$/);
  t.like(up.body, { object: 'media', mime_type: 'image/png', width: 30, height: 20, deduped: false, filename: 'dot.png' });
  t.regex(up.body.sha256, /^[0-9a-f]{64}$/);

  const got = await fetch(`${p.url}/v1/media/${up.body.id}`, { headers: user.headers });
  t.is(got.status, 200);
  t.like(await got.json(), { id: up.body.id, bytes: up.body.bytes });

  const content = await fetch(`${p.url}/v1/media/${up.body.id}/content`, { headers: user.headers });
  t.is(content.status, 200);
  t.is(content.headers.get('content-type'), 'image/png');
  const bytes = Buffer.from(await content.arrayBuffer());
  t.is(bytes.length, up.body.bytes);
  t.like(await sharp(bytes).metadata(), { width: 30, height: 20, format: 'png' });

  // The signed URL in the answer works without a credential.
  const signed = await fetch(up.body.url);
  t.is(signed.status, 200);
  t.deepEqual(Buffer.from(await signed.arrayBuffer()), bytes);

  const list = await fetch(`${p.url}/v1/media?limit=10`, { headers: user.headers });
  const listBody = (await list.json()) as any;
  t.like(listBody, { object: 'list', total_count: 1, has_more: false });
  t.is(listBody.data[0].id, up.body.id);

  const del = await fetch(`${p.url}/v1/media/${up.body.id}`, { method: 'DELETE', headers: user.headers });
  t.deepEqual(await del.json(), { id: up.body.id, object: 'media.deleted', deleted: true });
  t.is((await fetch(`${p.url}/v1/media/${up.body.id}`, { headers: user.headers })).status, 404);
});

test('/llm/v1/media/... reaches the same handlers as /v1/media/... (the edge routes both prefixes)', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 12, 10, 2);
  const up = await postJson(`${p.url}/llm/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
  t.is(up.status, 201, JSON.stringify(up.body));
  const viaAlias = await fetch(`${p.url}/llm/v1/media/${up.body.id}`, { headers: user.headers });
  t.is(viaAlias.status, 200);
  t.like(await viaAlias.json(), { id: up.body.id, width: 12, height: 10 });
  t.is((await fetch(`${p.url}/v1/media/${up.body.id}`, { headers: user.headers })).status, 200);
  const list = (await (await fetch(`${p.url}/llm/v1/media`, { headers: user.headers })).json()) as any;
  t.is(list.total_count, 1);
  t.is((await fetch(`${p.url}/llm/v1/media/${up.body.id}`)).status, 401, 'a credential is required on the alias too');
  const missing = await fetch(`${p.url}/llm/v1/media/jan_00000000000000000000000000`, { headers: user.headers });
  t.is(missing.status, 404);
  t.regex(((await missing.json()) as any).error.message, /No media found/, 'answered by media-api, not an unknown route');
  t.is((await fetch(`${p.url}/llm/v1/media/${up.body.id}`, { method: 'DELETE', headers: user.headers })).status, 200);
});
