import test from 'ava';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';
import { startS3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { s3rverSettings, startS3rver, type S3Server } from '../helpers/s3rver.js';

// HEAD /v1/media/{id}/content on the S3 driver answers from the object's metadata (HeadObject):
// it never asks the store for the body (no GetObject), and its headers are the ones GET sends. The
// store is a real S3-protocol server (s3rver) behind a proxy that only records what reaches it.
const BUCKET = 'media-head';
let s3: S3Server;
let proxy: Awaited<ReturnType<typeof startS3FaultProxy>>;
const seen: { method: string; url: string }[] = [];
let p: MediaPlatform;

test.before(async () => {
  s3 = await startS3rver(BUCKET);
  proxy = await startS3FaultProxy(s3.port, (req) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '' });
    return null;
  });
  p = await startMediaPlatform(s3rverSettings(proxy.endpoint, BUCKET));
});
test.after.always(async () => {
  await p?.stop();
  await proxy?.close();
  await s3?.close();
});

const SAME = ['content-type', 'content-length', 'x-content-type-options', 'content-security-policy', 'cache-control'];
const pick = (headers: Headers) => Object.fromEntries(SAME.map((name) => [name, headers.get(name)]));
const objectReads = () => seen.filter((r) => r.method === 'GET' && r.url.includes('/objects/')).length;

test('HEAD of the content reads no body from S3 and answers the headers GET sends', async (t) => {
  const user = await p.newUser();
  const image = await solidImage('png', 9, 9, 211);
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: image.toString('base64') } });
  t.is(up.status, 201, JSON.stringify(up.body));
  const url = `${p.url}/v1/media/${up.body.id}/content`;

  const readsBefore = objectReads();
  const head = await fetch(url, { method: 'HEAD', headers: user.headers });
  t.is(head.status, 200);
  t.is(objectReads(), readsBefore, 'no GetObject for a HEAD');
  t.true(seen.some((r) => r.method === 'HEAD' && r.url.includes('/objects/')), 'answered from HeadObject');

  const get = await fetch(url, { headers: user.headers });
  t.is(get.status, 200);
  const body = Buffer.from(await get.arrayBuffer());
  t.is(objectReads(), readsBefore + 1, 'GET does read the object');
  t.deepEqual(pick(head.headers), pick(get.headers));
  t.is(head.headers.get('content-length'), String(body.length));

  const missing = await fetch(`${p.url}/v1/media/jan_00000000000000000000000000/content`, { method: 'HEAD', headers: user.headers });
  t.is(missing.status, 404);
});
