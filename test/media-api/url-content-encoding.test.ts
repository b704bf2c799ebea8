import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// A URL whose server compresses the image although it was not asked to (an object stored gzipped
// with `Content-Encoding: gzip` is served so to every client, and browsers show it) was refused
// as "not an image": the compressed bytes went to the decoder. The codings are undone now, with
// the output cut at MEDIA_MAX_BYTES, so a small compressed body cannot inflate past it.
const MAX_BYTES = 100_000;
let p: MediaPlatform;
let server: http.Server;
let base = '';
const bodies = new Map<string, { body: Buffer; encoding: string }>();

test.before(async () => {
  server = http.createServer((req, res) => {
    const served = bodies.get(req.url ?? '');
    if (!served) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'image/png', 'content-encoding': served.encoding, 'content-length': served.body.length }).end(served.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  p = await startMediaPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', MEDIA_MAX_BYTES: String(MAX_BYTES) });
});
test.after.always(async () => {
  await p?.stop();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
});

const serve = (path: string, body: Buffer, encoding: string) => {
  bodies.set(path, { body, encoding });
  return `${base}${path}`;
};

test('a gzip, deflate, brotli or doubly encoded image body is decoded and stored', async (t) => {
  const user = await p.newUser();
  const cases: Array<[string, (png: Buffer) => Buffer, string]> = [
    ['gzip', (b) => zlib.gzipSync(b), 'gzip'],
    ['x-gzip', (b) => zlib.gzipSync(b), 'x-gzip'],
    ['deflate', (b) => zlib.deflateSync(b), 'deflate'],
    ['raw deflate', (b) => zlib.deflateRawSync(b), 'deflate'],
    ['br', (b) => zlib.brotliCompressSync(b), 'br'],
    ['gzip then br', (b) => zlib.brotliCompressSync(zlib.gzipSync(b)), 'gzip, br'],
    ['identity', (b) => b, 'identity'],
  ];
  let seed = 81;
  for (const [what, encode, header] of cases) {
    const png = await solidImage('png', 7, 4, seed++);
    const res = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'url', url: serve(`/${seed}`, encode(png), header) } });
    t.is(res.status, 201, `${what}: ${JSON.stringify(res.body)}`);
    t.like(res.body, { object: 'media', mime_type: 'image/png', width: 7, height: 4 }, what);
  }
});

test('a compressed body that inflates past the size limit is refused as too large; an unknown or broken coding is a 400 naming source.url', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 7, 4, 99);
  const padded = Buffer.concat([png, Buffer.alloc(MAX_BYTES * 50)]);
  const bomb = zlib.gzipSync(padded);
  t.true(bomb.length < MAX_BYTES, 'the compressed body itself is within the limit');
  const cases: Array<[string, RegExp]> = [
    [serve('/bomb', bomb, 'gzip'), new RegExp(`exceeds the size limit of ${MAX_BYTES} bytes`)],
    [serve('/bomb-br', zlib.brotliCompressSync(padded), 'br'), new RegExp(`exceeds the size limit of ${MAX_BYTES} bytes`)],
    // Wrapped deflate past the limit is "too large" too, not retried as raw deflate and called broken.
    [serve('/bomb-deflate', zlib.deflateSync(padded), 'deflate'), new RegExp(`exceeds the size limit of ${MAX_BYTES} bytes`)],
    [serve('/unknown', png, 'compress'), /Content-Encoding that cannot be read \(compress\)/],
    // A coding named like a member every object has is no decoder either.
    [serve('/member', png, 'constructor'), /Content-Encoding that cannot be read \(constructor\)/],
    // A header may name thousands of layers, each a pass over up to the limit: six are refused unread.
    [serve('/layers', png, Array(6).fill('gzip').join(', ')), /6 Content-Encoding layers \(at most 5 are read\)/],
    [serve('/broken', Buffer.from('not gzip at all'), 'gzip'), /could not be decoded \(Content-Encoding gzip\)/],
  ];
  for (const [url, message] of cases) {
    const res = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'url', url } });
    t.is(res.status, 400, `${url}: ${JSON.stringify(res.body)}`);
    t.like(res.body.error, { type: 'invalid_request_error', param: 'source.url' }, url);
    t.regex(res.body.error.message, message, url);
  }
  t.truthy(user.userId);
  const [row] = await p.runtime.db.knex('media').where({ user_id: user.userId }).count({ n: '*' });
  t.is(Number(row!.n), 0);
});
