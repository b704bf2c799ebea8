import { createHash } from 'node:crypto';
import zlib from 'node:zlib';
import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { createS3Storage } from '../../domains/media/index.js';
import { startS3rver, type S3Server } from '../helpers/s3rver.js';
import { solidImage } from '../media/fixtures.js';

// A presigned PUT URL must accept the declared bytes on a real S3. The SDK, left to its default
// checksum setting, signed into the URL the CRC32 of the body it had when signing (none:
// `x-amz-checksum-crc32=AAAAAA==`), and S3 checks the uploaded body against every
// `x-amz-checksum-<algorithm>` the request names, so each direct upload failed there with a
// checksum mismatch. s3rver does not check checksums: the check S3 makes is done here.
const BUCKET = 'media-checksum';
let server: S3Server;
let endpoint: string;

test.before(async () => {
  server = await startS3rver(BUCKET);
  endpoint = server.endpoint;
});
test.after.always(async () => {
  await server?.close();
});

/** The checksum S3 computes over `body` for `algorithm`, base64 as it appears in the URL. */
function checksumOf(algorithm: string, body: Buffer): string | null {
  if (algorithm === 'crc32') {
    const out = Buffer.alloc(4);
    out.writeUInt32BE(zlib.crc32(body) >>> 0);
    return out.toString('base64');
  }
  if (algorithm === 'sha1' || algorithm === 'sha256') return createHash(algorithm).update(body).digest('base64');
  return null;
}

test('a presigned PUT URL signs no checksum the uploaded bytes would not match, and the upload lands', async (t) => {
  const storage = createS3Storage({ endpoint, bucket: BUCKET, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', forcePathStyle: true, clock: new ManualClock(Date.now()) });
  t.teardown(() => storage.close());
  const body = await solidImage('png', 9, 7, 41);
  const key = 'uploads/jan_01m82ydtgn9h7jwh5kj6tmvd2g';
  const target = await storage.uploadUrl(key, { expiresIn: 300, contentType: 'image/png', bytes: body.length });
  const params = new URL(target.url).searchParams;
  for (const [name, value] of params) {
    const checksum = /^x-amz-checksum-(.+)$/i.exec(name);
    if (!checksum || checksum[1]!.toLowerCase() === 'mode') continue;
    const algorithm = checksum[1]!.toLowerCase();
    t.is(value, checksumOf(algorithm, body) ?? `(S3 checks ${algorithm} over the body)`, `${name} must match the body S3 receives`);
  }
  const put = await fetch(target.url, { method: 'PUT', headers: { 'content-type': 'image/png' }, body });
  t.is(put.status, 200, await put.text());
  t.deepEqual(await storage.read(key, 100_000), body);
});

// A presigned GET named `x-amz-checksum-mode=ENABLED` (the SDK validates response checksums by
// default): S3 does not need it, and some S3-compatible stores refuse a query parameter they do not
// know or leave it out of the signature they check. The URL carries only what S3 needs.
test('a presigned GET URL names no x-amz-checksum-mode, and downloads the object', async (t) => {
  const storage = createS3Storage({ endpoint, bucket: BUCKET, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', forcePathStyle: true, clock: new ManualClock(Date.now()) });
  t.teardown(() => storage.close());
  const body = await solidImage('png', 5, 6, 12);
  const key = 'uploads/jan_01m82ydtgn9h7jwh5kj6tmvd3h';
  await storage.put(key, body, 'image/png');
  const target = await storage.downloadUrl(key, { expiresIn: 300, contentType: 'image/png', filename: 'pixel.png' });
  const names = [...new URL(target.url).searchParams.keys()].map((name) => name.toLowerCase());
  t.false(names.some((name) => name.startsWith('x-amz-checksum')), names.join(', '));
  const got = await fetch(target.url);
  t.is(got.status, 200, await got.clone().text());
  t.deepEqual(Buffer.from(await got.arrayBuffer()), body);
});
