import test from 'ava';
import sharp from 'sharp';
import { ManualClock } from '../../services/kit/clock.js';
import { createS3Storage, objectKey, type ObjectStorage } from '../../domains/media/index.js';
import { startS3rver, type S3Server } from '../helpers/s3rver.js';
import { phonePhoto, solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';
import { amzDateSeconds, expectedSignature } from './sigv4.js';

// The S3 driver against a real S3-protocol server (s3rver) started here. s3rver does not verify
// SigV4, so the presigned URLs' query parameters, expiry and signatures are checked independently.
const BUCKET = 'media-test';
const KEY_ID = 'S3RVER';
const SECRET = 'S3RVER';
let server: S3Server;
let endpoint: string;

test.before(async () => {
  server = await startS3rver(BUCKET);
  endpoint = server.endpoint;
});
test.after.always(async () => {
  await server?.close();
});

const storageWith = (clock: ManualClock, publicEndpoint?: string): ObjectStorage =>
  createS3Storage({ endpoint, publicEndpoint, bucket: BUCKET, region: 'eu-west-3', accessKeyId: KEY_ID, secretAccessKey: SECRET, forcePathStyle: true, clock });

test('driver: put, read (bounded), open, exists, delete (idempotent)', async (t) => {
  const storage = storageWith(new ManualClock());
  const body = await solidImage('png', 8, 8, 1);
  const key = objectKey('ab'.repeat(32));
  t.false(await storage.exists(key));
  t.is(await storage.read(key, 1000), null);
  await storage.put(key, body, 'image/png');
  t.true(await storage.exists(key));
  t.deepEqual(await storage.read(key, 10_000), body);
  await t.throwsAsync(storage.read(key, body.length - 1), { message: /exceeds/ });
  const opened = await storage.open(key);
  t.is(opened!.size, body.length);
  opened!.body.destroy();
  await storage.delete(key);
  await storage.delete(key);
  t.false(await storage.exists(key));
  await storage.close();
});

test('presigned GET: SigV4 query parameters, expiry, a valid signature, pinned content type and disposition', async (t) => {
  const clock = new ManualClock(Date.UTC(2026, 10, 23, 1, 2, 3));
  const storage = storageWith(clock);
  const key = objectKey('cd'.repeat(32));
  const body = await solidImage('jpeg', 8, 8, 2);
  await storage.put(key, body, 'image/jpeg');
  // Sign with a clock that is "now" for the server too, so the URL is usable.
  clock.set(Date.now());
  const link = await storage.downloadUrl(key, { expiresIn: 300, contentType: 'image/jpeg', filename: 'photo.jpg' });
  const q = new URL(link.url).searchParams;
  t.is(q.get('X-Amz-Algorithm'), 'AWS4-HMAC-SHA256');
  t.regex(q.get('X-Amz-Credential')!, /^S3RVER\/\d{8}\/eu-west-3\/s3\/aws4_request$/);
  t.is(q.get('X-Amz-Expires'), '300');
  t.is(q.get('X-Amz-SignedHeaders'), 'host');
  t.regex(q.get('X-Amz-Signature')!, /^[0-9a-f]{64}$/);
  t.is(q.get('response-content-type'), 'image/jpeg');
  t.regex(q.get('response-content-disposition')!, /filename="photo.jpg"/);
  const signedAt = amzDateSeconds(q.get('X-Amz-Date')!);
  t.is(signedAt, Math.floor(clock.now() / 1000));
  t.is(link.expiresAt, signedAt + 300);
  t.is(q.get('X-Amz-Signature'), expectedSignature(link.url, 'GET', {}, SECRET), 'the signature verifies with the secret');
  t.not(q.get('X-Amz-Signature'), expectedSignature(link.url, 'GET', {}, 'another secret'));
  const tampered = new URL(link.url);
  tampered.pathname = tampered.pathname.replace('cdcd', 'cdce');
  t.not(q.get('X-Amz-Signature'), expectedSignature(tampered.toString(), 'GET', {}, SECRET), 'a changed key no longer matches');

  const res = await fetch(link.url);
  t.is(res.status, 200);
  t.is(res.headers.get('content-type'), 'image/jpeg');
  t.deepEqual(Buffer.from(await res.arrayBuffer()), body);

  // Signed an hour ago for 60 s: the server refuses it as expired.
  clock.set(Date.now() - 3600_000);
  const stale = await storage.downloadUrl(key, { expiresIn: 60, contentType: 'image/jpeg' });
  const refused = await fetch(stale.url);
  t.is(refused.status, 403);
  t.regex(await refused.text(), /AccessDenied|expired/i);
  await storage.close();
});

test('presigned PUT: Content-Type and Content-Length are signed headers; S3_PUBLIC_ENDPOINT is the host clients get', async (t) => {
  const clock = new ManualClock(Date.now());
  const publicEndpoint = 'https://media.example.com';
  const storage = storageWith(clock, publicEndpoint);
  const target = await storage.uploadUrl('uploads/jan_01m82ydtgn9h7jwh5kj6tmvd2f', { expiresIn: 900, contentType: 'image/png', bytes: 1234 });
  const u = new URL(target.url);
  t.is(u.origin, publicEndpoint);
  t.is(u.pathname, `/${BUCKET}/uploads/jan_01m82ydtgn9h7jwh5kj6tmvd2f`);
  t.is(u.searchParams.get('X-Amz-SignedHeaders'), 'content-length;content-type;host');
  t.is(u.searchParams.get('X-Amz-Expires'), '900');
  t.deepEqual(target.headers, { 'content-type': 'image/png', 'content-length': '1234' });
  const headers = { 'content-type': 'image/png', 'content-length': '1234' };
  t.is(u.searchParams.get('X-Amz-Signature'), expectedSignature(target.url, 'PUT', headers, SECRET));
  t.not(u.searchParams.get('X-Amz-Signature'), expectedSignature(target.url, 'PUT', { ...headers, 'content-length': '99999' }, SECRET), 'another size breaks the signature');
  t.not(u.searchParams.get('X-Amz-Signature'), expectedSignature(target.url, 'PUT', { ...headers, 'content-type': 'text/html' }, SECRET), 'another type breaks the signature');
  const download = await storage.downloadUrl(objectKey('ef'.repeat(32)), { expiresIn: 60, contentType: 'image/png' });
  t.is(new URL(download.url).origin, publicEndpoint);
  await storage.close();
});

test.serial('media-api on the S3 driver, through the edge: upload, presigned download, direct upload + complete, delete', async (t) => {
  let p: MediaPlatform | undefined;
  try {
    p = await startMediaPlatform({
      S3_ENDPOINT: endpoint,
      S3_BUCKET: BUCKET,
      S3_REGION: 'us-east-1',
      S3_ACCESS_KEY_ID: KEY_ID,
      S3_SECRET_ACCESS_KEY: SECRET,
      S3_FORCE_PATH_STYLE: 'true',
    });
    const user = await p.newUser();
    const png = await solidImage('png', 7, 9, 3);
    const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
    t.is(up.status, 201, JSON.stringify(up.body));
    t.true(up.body.url.startsWith(`${endpoint}/${BUCKET}/objects/`), up.body.url);
    t.is(new URL(up.body.url).searchParams.get('X-Amz-Signature'), expectedSignature(up.body.url, 'GET', {}, SECRET));
    const fromS3 = await fetch(up.body.url);
    t.is(fromS3.status, 200);
    t.like(await sharp(Buffer.from(await fromS3.arrayBuffer())).metadata(), { width: 7, height: 9 });

    const link = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: up.body.id, expires_in: 60 });
    t.is(new URL(link.body.url).searchParams.get('X-Amz-Expires'), '60');
    t.is((await fetch(link.body.url)).status, 200);

    const photo = await phonePhoto();
    const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: photo.length });
    t.is(reserve.status, 201);
    t.regex(new URL(reserve.body.upload_url).searchParams.get('X-Amz-SignedHeaders')!, /content-length;content-type/);
    const put = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/jpeg' }, body: photo });
    t.is(put.status, 200, await put.text());
    const done = await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {});
    t.is(done.status, 201, JSON.stringify(done.body));
    t.like(done.body, { id: reserve.body.id, width: 20, height: 40 });
    const content = await fetch(`${p.url}/v1/media/${done.body.id}/content`, { headers: user.headers });
    t.is((await sharp(Buffer.from(await content.arrayBuffer())).metadata()).exif, undefined);

    t.is((await fetch(`${p.url}/v1/media/${up.body.id}`, { method: 'DELETE', headers: user.headers })).status, 200);
  } finally {
    await p?.stop();
  }
});
