import test from 'ava';
import { Agent, FormData as UndiciFormData, fetch as undiciFetch } from 'undici';
import sharp from 'sharp';
import { hasGpsPointer, noisePng, phonePhoto, pngBombHeader, solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';
import { startImageServer } from './image-server.js';

// Uploads through the edge with a user credential (guest JWTs), on the filesystem driver.
let p: MediaPlatform;
let images: Awaited<ReturnType<typeof startImageServer>>;
const MAX_BYTES = 400_000;
const QUOTA = 100_000;

test.before(async () => {
  images = await startImageServer();
  p = await startMediaPlatform({ EGRESS_ALLOW_HOSTS: 'localhost', MEDIA_MAX_BYTES: String(MAX_BYTES), MEDIA_QUOTA_BYTES_PER_USER: String(QUOTA) });
});
test.after.always(async () => {
  await p?.stop();
  await images?.close();
});

const upload = (headers: Record<string, string>, body: unknown) => postJson(`${p.url}/v1/media/upload`, headers, body);

function expectError(t: any, res: { status: number; body: any }, status: number, param: string | null, message: RegExp) {
  t.is(res.status, status, JSON.stringify(res.body));
  t.is(res.body.error?.param, param);
  t.regex(res.body.error?.message ?? '', message);
  t.truthy(res.body.error?.request_id);
}

test('every source kind: URL from an allowed local server, base64, data URL, multipart', async (t) => {
  const user = await p.newUser();
  const byUrl = await upload(user.headers, { source: { type: 'url', url: images.serve('kinds.png', await solidImage('png', 10, 10, 11)) } });
  t.is(byUrl.status, 201, JSON.stringify(byUrl.body));
  t.like(byUrl.body, { mime_type: 'image/png', width: 10, height: 10 });

  const jpeg = await solidImage('jpeg', 12, 8, 12);
  const byBase64 = await upload(user.headers, { source: { type: 'base64', data: jpeg.toString('base64'), mime_type: 'image/png' } });
  t.is(byBase64.status, 201);
  t.is(byBase64.body.mime_type, 'image/jpeg', 'the type comes from the bytes, not from the claim');

  const webp = await solidImage('webp', 9, 7, 13);
  const byDataUrl = await upload(user.headers, { source: { type: 'data_url', data_url: `data:image/webp;base64,${webp.toString('base64')}` }, filename: 'pic.webp' });
  t.is(byDataUrl.status, 201);
  t.like(byDataUrl.body, { mime_type: 'image/webp', width: 9, height: 7, filename: 'pic.webp' });

  const form = new FormData();
  form.append('file', new Blob([await solidImage('gif', 6, 5, 14)]), 'anim.gif');
  const multipart = await fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: user.headers, body: form });
  const multipartBody = (await multipart.json()) as any;
  t.is(multipart.status, 201, JSON.stringify(multipartBody));
  t.like(multipartBody, { mime_type: 'image/gif', width: 6, height: 5, filename: 'anim.gif' });

  const ids = new Set([byUrl.body.id, byBase64.body.id, byDataUrl.body.id, multipartBody.id]);
  t.is(ids.size, 4);
  for (const id of ids) t.regex(id, /^jan_[0-9abcdefghjkmnpqrstvwxyz]{26}$/);
});

test('dedup within a user, isolation across users (another user\'s id answers 404 everywhere)', async (t) => {
  const alice = await p.newUser();
  const bob = await p.newUser();
  const png = await solidImage('png', 20, 20, 21);
  const first = await upload(alice.headers, { source: { type: 'base64', data: png.toString('base64') } });
  const again = await upload(alice.headers, { source: { type: 'data_url', data_url: `data:image/png;base64,${png.toString('base64')}` } });
  t.is(first.status, 201);
  t.is(again.status, 200);
  t.is(again.body.id, first.body.id);
  t.true(again.body.deduped);
  t.false(first.body.deduped);

  const bobs = await upload(bob.headers, { source: { type: 'base64', data: png.toString('base64') } });
  t.is(bobs.status, 201, 'nothing tells Bob the bytes existed');
  t.false(bobs.body.deduped);
  t.not(bobs.body.id, first.body.id);
  t.deepEqual(Object.keys(bobs.body).sort(), Object.keys(first.body).sort());
  t.is(bobs.body.bytes, first.body.bytes);

  const id = first.body.id;
  const asBob = bob.headers;
  for (const [method, path, body] of [
    ['GET', `/v1/media/${id}`],
    ['GET', `/v1/media/${id}/content`],
    ['DELETE', `/v1/media/${id}`],
    ['POST', `/v1/media/${id}/complete`],
    ['POST', '/v1/media/presigned-url', { media_id: id }],
    ['POST', '/v1/media/resolve', { payload: { image_url: { url: id } } }],
  ] as Array<[string, string, unknown?]>) {
    const res = await fetch(`${p.url}${path}`, {
      method,
      headers: { ...asBob, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = (await res.json()) as any;
    t.is(res.status, 404, `${method} ${path}`);
    t.is(json.error.type, 'not_found_error');
    t.true(json.error.message.includes(id), `${method} ${path} names the id`);
  }
  const bobList = (await (await fetch(`${p.url}/v1/media`, { headers: asBob })).json()) as any;
  t.deepEqual(bobList.data.map((m: any) => m.id), [bobs.body.id]);

  // Alice deleting hers leaves Bob's copy (same stored object) intact.
  t.is((await fetch(`${p.url}/v1/media/${id}`, { method: 'DELETE', headers: alice.headers })).status, 200);
  const bobContent = await fetch(`${p.url}/v1/media/${bobs.body.id}/content`, { headers: asBob });
  t.is(bobContent.status, 200);
  t.is(Buffer.from(await bobContent.arrayBuffer()).length, bobs.body.bytes);
});

test('rejections: not an image, corrupt, empty, too large, too many pixels (a 50,000 × 50,000 PNG header), unsupported type', async (t) => {
  const user = await p.newUser();
  const b64 = (bytes: Buffer) => ({ source: { type: 'base64', data: bytes.toString('base64') } });
  expectError(t, await upload(user.headers, b64(Buffer.from('just some text, not pixels'))), 400, 'source.data', /not an image/);
  const jpeg = await solidImage('jpeg', 64, 64, 31);
  expectError(t, await upload(user.headers, b64(jpeg.subarray(0, Math.floor(jpeg.length / 3)))), 400, 'source.data', /corrupt or truncated/);
  expectError(t, await upload(user.headers, { source: { type: 'base64', data: '====' } }), 400, 'source.data', /empty|not valid base64/);
  expectError(t, await upload(user.headers, { source: { type: 'base64', data: 'not base64!' } }), 400, 'source.data', /not valid base64/);
  expectError(t, await upload(user.headers, b64(await noisePng(400, 400))), 400, 'source.data', new RegExp(`size limit of ${MAX_BYTES} bytes`));
  const bomb = pngBombHeader();
  t.true(bomb.length < 2000, 'the bomb is a tiny file');
  expectError(t, await upload(user.headers, b64(bomb)), 400, 'source.data', /too many pixels \(50000 × 50000\)/);
  const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>');
  expectError(t, await upload(user.headers, b64(svg)), 400, 'source.data', /Unsupported image type/);
  expectError(t, await upload(user.headers, { source: { type: 'data_url', data_url: 'data:text/plain,hello' } }), 400, 'source.data_url', /data URL/);
  expectError(t, await upload(user.headers, { source: { type: 'ftp', url: 'x' } }), 400, 'source.type', /./);

  const form = new FormData();
  form.append('other', 'x');
  const noFile = await fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: user.headers, body: form });
  expectError(t, { status: noFile.status, body: await noFile.json() }, 400, 'file', /'file'/);
  const bigForm = new FormData();
  bigForm.append('file', new Blob([await noisePng(400, 400)]), 'big.png');
  const big = await fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: user.headers, body: bigForm });
  expectError(t, { status: big.status, body: await big.json() }, 400, 'file', /size limit/);

  // Parts other than `file` are skipped, but the body as a whole is bounded too.
  // (On a connection of its own: answered before its body is read, the connection is not reusable.)
  const padded = new UndiciFormData();
  padded.append('padding', new Blob([Buffer.alloc(MAX_BYTES + 2 * 1024 * 1024)]), 'pad.bin');
  padded.append('file', new Blob([await solidImage('png', 4, 4, 33)]), 'tiny.png');
  const own = new Agent({ pipelining: 0 });
  try {
    const paddedRes = await undiciFetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: user.headers, body: padded, dispatcher: own });
    expectError(t, { status: paddedRes.status, body: await paddedRes.json() }, 413, 'body', /exceeds the limit/);
  } finally {
    await own.destroy();
  }

  // Nothing was stored for this user.
  const list = (await (await fetch(`${p.url}/v1/media`, { headers: user.headers })).json()) as any;
  t.is(list.total_count, 0);
});

test('URL rejections: a redirect to a loopback address, a metadata IP, a private host, a non-http scheme, an error status', async (t) => {
  const user = await p.newUser();
  const loopbackTarget = `http://127.0.0.1:${images.port}/img/a.png`;
  images.serve('a.png', await solidImage('png', 4, 4, 41));
  const redirect = `http://localhost:${images.port}/redirect?to=${encodeURIComponent(loopbackTarget)}`;
  expectError(t, await upload(user.headers, { source: { type: 'url', url: redirect } }), 400, 'source.url', /not allowed/);
  expectError(t, await upload(user.headers, { source: { type: 'url', url: 'http://169.254.169.254/latest/meta-data/' } }), 400, 'source.url', /not allowed/);
  expectError(t, await upload(user.headers, { source: { type: 'url', url: 'http://[::ffff:169.254.169.254]/' } }), 400, 'source.url', /not allowed/);
  expectError(t, await upload(user.headers, { source: { type: 'url', url: 'http://10.0.0.1/x.png' } }), 400, 'source.url', /not allowed/);
  expectError(t, await upload(user.headers, { source: { type: 'url', url: 'file:///etc/passwd' } }), 400, 'source.url', /not allowed/);
  expectError(t, await upload(user.headers, { source: { type: 'url', url: `http://localhost:${images.port}/img/missing.png` } }), 400, 'source.url', /HTTP 404/);
  // A 3xx that is no redirect (no Location) is named as what it is, not as "too many redirects".
  for (const status of [304, 300, 307]) {
    const res = await upload(user.headers, { source: { type: 'url', url: `http://localhost:${images.port}/status/${status}` } });
    expectError(t, res, 400, 'source.url', new RegExp(`HTTP ${status} \\(a 3xx without a Location header`));
    t.notRegex(res.body.error.message, /redirected more than/);
  }
  // Four redirects in a row (the limit is 3), all on the allowed host.
  let chain = `http://localhost:${images.port}/img/a.png`;
  for (let i = 0; i < 4; i++) chain = `http://localhost:${images.port}/redirect?to=${encodeURIComponent(chain)}`;
  expectError(t, await upload(user.headers, { source: { type: 'url', url: chain } }), 400, 'source.url', /redirect/);
  // Within the limit it works.
  const ok = await upload(user.headers, { source: { type: 'url', url: `http://localhost:${images.port}/redirect?to=${encodeURIComponent(`http://localhost:${images.port}/img/a.png`)}` } });
  t.is(ok.status, 201, JSON.stringify(ok.body));
});

test('quota: an upload that would take the user over MEDIA_QUOTA_BYTES_PER_USER is 413 in shape A', async (t) => {
  const user = await p.newUser();
  const big = await noisePng(200, 200); // ~120 KB, under the size limit, over the quota
  const res = await upload(user.headers, { source: { type: 'base64', data: big.toString('base64') } });
  expectError(t, res, 413, 'source.data', /quota of 100000 bytes/);
  t.is(res.body.error.type, 'invalid_request_error');
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: QUOTA + 1 });
  expectError(t, reserve, 413, 'bytes', /quota/);
});

test('a phone photo with EXIF GPS and orientation 6 comes back upright and without EXIF', async (t) => {
  const user = await p.newUser();
  const photo = await phonePhoto();
  const before = await sharp(photo).metadata();
  t.is(before.orientation, 6);
  t.true(hasGpsPointer(before.exif), 'the fixture carries GPS');
  const res = await upload(user.headers, { source: { type: 'base64', data: photo.toString('base64') }, filename: 'IMG_0001.jpg' });
  t.is(res.status, 201);
  t.like(res.body, { width: 20, height: 40, mime_type: 'image/jpeg' });
  const stored = Buffer.from(await (await fetch(`${p.url}/v1/media/${res.body.id}/content`, { headers: user.headers })).arrayBuffer());
  const after = await sharp(stored).metadata();
  t.is(after.width, 20);
  t.is(after.height, 40);
  t.is(after.exif, undefined, 'no EXIF block at all (no GPS, no camera make)');
  t.is(after.orientation, undefined);
  t.is(after.xmp, undefined);
  t.is(after.icc, undefined);
  t.false(stored.includes(Buffer.from('PhoneMaker')));
  // Upright: the red half (left in the sensor's frame) is now on top, the blue half at the bottom.
  const { data, info } = await sharp(stored).raw().toBuffer({ resolveWithObject: true });
  const pixel = (x: number, y: number) => Array.from(data.subarray((y * info.width + x) * info.channels, (y * info.width + x) * info.channels + 3));
  const [rTop, , bTop] = pixel(10, 5);
  const [rBottom, , bBottom] = pixel(10, 35);
  t.true(rTop! > 200 && bTop! < 60, `top is red (${pixel(10, 5)})`);
  t.true(bBottom! > 200 && rBottom! < 60, `bottom is blue (${pixel(10, 35)})`);
});

test('presigned download URL: works without a credential, honours expires_in, bounded', async (t) => {
  const user = await p.newUser();
  const up = await upload(user.headers, { source: { type: 'base64', data: (await solidImage('png', 5, 5, 51)).toString('base64') }, filename: 'x.png' });
  const before = Math.floor(Date.now() / 1000);
  const link = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: up.body.id, expires_in: 120 });
  t.is(link.status, 200);
  t.is(link.body.object, 'media.url');
  t.true(Math.abs(link.body.expires_at - (before + 120)) <= 2);
  const res = await fetch(link.body.url);
  t.is(res.status, 200);
  t.is(res.headers.get('content-type'), 'image/png');
  t.regex(res.headers.get('content-disposition') ?? '', /filename="x.png"/);
  t.is(Buffer.from(await res.arrayBuffer()).length, up.body.bytes);
  expectError(t, await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: up.body.id, expires_in: 10_000_000 }), 400, 'expires_in', /at most/);
  expectError(t, await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: 'jan_nope' }), 404, 'media_id', /jan_nope/);
});

test('direct upload: reserve, PUT to the upload URL, complete (validated, sanitised, deduplicated)', async (t) => {
  const user = await p.newUser();
  const photo = await phonePhoto();
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: photo.length, filename: 'direct.jpg' });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  t.regex(reserve.body.id, /^jan_/);
  t.is(reserve.body.method, 'PUT');
  // Not visible until completed.
  t.is((await fetch(`${p.url}/v1/media/${reserve.body.id}`, { headers: user.headers })).status, 404);
  // Completing before anything was uploaded is a clear 400; the reservation stays open.
  expectError(t, await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {}), 400, 'id', /Nothing was uploaded/);
  // The upload URL accepts only the signed size and type.
  const wrongSize = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: photo.subarray(1) });
  t.is(wrongSize.status, 403);
  const wrongType = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: photo });
  t.is(wrongType.status, 403);
  const put = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': reserve.body.headers['content-type'] }, body: photo });
  t.is(put.status, 200, await put.text());
  const done = await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {});
  t.is(done.status, 201, JSON.stringify(done.body));
  t.like(done.body, { id: reserve.body.id, width: 20, height: 40, deduped: false, filename: 'direct.jpg' });
  const again = await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {});
  t.is(again.body.id, reserve.body.id, 'complete is idempotent');
  const stored = Buffer.from(await (await fetch(`${p.url}/v1/media/${done.body.id}/content`, { headers: user.headers })).arrayBuffer());
  t.is((await sharp(stored).metadata()).exif, undefined);

  // The same bytes uploaded directly again dedup to the first media.
  const second = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: photo.length });
  await fetch(second.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: photo });
  const merged = await postJson(`${p.url}/v1/media/${second.body.id}/complete`, user.headers, {});
  t.is(merged.status, 200);
  t.like(merged.body, { id: done.body.id, deduped: true });
  // A completed upload cannot be written again.
  t.is((await fetch(second.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: photo })).status, 403);

  // Not an image: refused at complete, and the reservation is gone.
  const junk = Buffer.from('definitely not a jpeg');
  const third = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: junk.length });
  await fetch(third.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: junk });
  expectError(t, await postJson(`${p.url}/v1/media/${third.body.id}/complete`, user.headers, {}), 400, 'id', /not an image/);
  t.is((await postJson(`${p.url}/v1/media/${third.body.id}/complete`, user.headers, {})).status, 404);

  expectError(t, await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/svg+xml', bytes: 10 }), 400, 'mime_type', /Unsupported/);
  expectError(t, await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: MAX_BYTES + 1 }), 400, 'bytes', /size limit/);
});

test('resolve: references in a chat payload become fresh URLs; no references → deep-equal; unknown id → 404 naming it', async (t) => {
  const user = await p.newUser();
  const a = await upload(user.headers, { source: { type: 'base64', data: (await solidImage('png', 3, 3, 61)).toString('base64') } });
  const b = await upload(user.headers, { source: { type: 'base64', data: (await solidImage('jpeg', 3, 3, 62)).toString('base64') } });
  const payload = {
    model: 'm',
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: `keep this text: ${a.body.id}` },
          { type: 'image_url', image_url: { url: a.body.id, detail: 'high' } },
          { type: 'image_url', image_url: { url: `data:image/jpeg;${b.body.id}` } },
        ],
      },
    ],
    input: [{ type: 'input_image', image_url: b.body.id }],
  };
  const res = await postJson(`${p.url}/v1/media/resolve`, user.headers, { payload });
  t.is(res.status, 200, JSON.stringify(res.body));
  const out = res.body.payload;
  t.is(out.messages[0].content[0].text, `keep this text: ${a.body.id}`, 'free text is left alone');
  t.is(out.messages[0].content[1].image_url.detail, 'high');
  const urls = [out.messages[0].content[1].image_url.url, out.messages[0].content[2].image_url.url, out.input[0].image_url];
  for (const url of urls) {
    t.regex(url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/media\/signed\//);
    t.is((await fetch(url)).status, 200);
  }
  const plain = { model: 'm', messages: [{ role: 'user', content: 'hi', image_url: { url: 'https://example.com/a.png' } }], n: [1, null, true] };
  t.deepEqual((await postJson(`${p.url}/v1/media/resolve`, user.headers, { payload: plain })).body, { payload: plain });
  const unknown = `jan_${'0'.repeat(10)}${'z'.repeat(16)}`;
  expectError(t, await postJson(`${p.url}/v1/media/resolve`, user.headers, { payload: { image_url: { url: unknown } } }), 404, 'payload', new RegExp(unknown));
  expectError(t, await postJson(`${p.url}/v1/media/resolve`, user.headers, {}), 400, 'payload', /payload/);
});
