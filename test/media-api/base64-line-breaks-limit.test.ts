import zlib from 'node:zlib';
import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// Base64 with MIME line breaks (CRLF after every 76 characters, as PHP's chunk_split, Java's MIME
// encoder and .NET's InsertLineBreaks write it) is read like any base64; but the upload route's
// body limit allowed only 4/3 of MEDIA_MAX_BYTES plus 1 MiB, so an image near the size limit sent
// that way (the breaks, escaped in JSON, add 4 bytes per 76) was a 413 on the body instead.
const MAX_BYTES = 16 * 1024 * 1024;
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform({ MEDIA_MAX_BYTES: String(MAX_BYTES), MEDIA_QUOTA_BYTES_PER_USER: String(4 * MAX_BYTES) });
});
test.after.always(async () => {
  await p?.stop();
});

/** A PNG of `total` bytes: a small image carrying a private ancillary chunk (dropped by sanitising). */
async function pngOfSize(total: number): Promise<Buffer> {
  const png = await solidImage('png', 4, 3, 71);
  const iendAt = png.length - 12;
  const padding = Buffer.alloc(total - png.length - 12, 0x5a);
  const type = Buffer.from('prVt');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(padding.length);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(Buffer.concat([type, padding])) >>> 0);
  return Buffer.concat([png.subarray(0, iendAt), length, type, padding, crc, png.subarray(iendAt)]);
}

const mimeBase64 = (bytes: Buffer) => bytes.toString('base64').replace(/.{76}/g, '$&\r\n');

test('an image within the size limit, sent as base64 with CRLF line breaks, is stored (base64 and data URL)', async (t) => {
  const user = await p.newUser();
  const image = await pngOfSize(MAX_BYTES - 64);
  t.is(image.length, MAX_BYTES - 64);
  const asBase64 = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: mimeBase64(image) } });
  t.is(asBase64.status, 201, JSON.stringify(asBase64.body).slice(0, 300));
  t.like(asBase64.body, { object: 'media', mime_type: 'image/png', width: 4, height: 3 });
  t.true(asBase64.body.bytes < 1000, 'the padding chunk is not stored');
  const other = await postJson(`${p.url}/v1/media/upload`, (await p.newUser()).headers, {
    source: { type: 'data_url', data_url: `data:image/png;base64,${mimeBase64(image)}` },
  });
  t.is(other.status, 201, JSON.stringify(other.body).slice(0, 300));
});

test('an image over the size limit is still refused, as the image (400 naming the field), not the body', async (t) => {
  const user = await p.newUser();
  const image = await pngOfSize(MAX_BYTES + 3);
  const res = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: mimeBase64(image) } });
  t.is(res.status, 400, JSON.stringify(res.body).slice(0, 300));
  t.like(res.body.error, { param: 'source.data' });
  t.regex(res.body.error.message, /exceeds the size limit of 16777216 bytes/);
});
