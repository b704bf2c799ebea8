import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import { createFilesystemStorage, createUrlSigner } from '../../domains/media/index.js';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// The filesystem driver's signed URLs: public by design, so the HMAC signature is the only
// credential. Any change to what was signed, or the passing of the expiry, is refused with 403.
const clock = new ManualClock(Date.now());
let p: MediaPlatform;
test.before(async () => {
  p = await startMediaPlatform({}, { clock });
});
test.after.always(async () => {
  await p?.stop();
});

test('the signer: every signed field is covered, expiry is enforced', (t) => {
  const signer = createUrlSigner(randomBytes(32));
  const key = `objects/ab/${'ab'.repeat(32)}`;
  const now = 1_800_000_000;
  const params = { method: 'GET' as const, key, exp: now + 60, ct: 'image/png', fn: 'a.png' };
  const query = Object.fromEntries(new URLSearchParams(signer.query(params)));
  t.is(signer.verify('GET', key, query, now), null);
  t.is(signer.verify('GET', key, query, now + 60), null, 'valid up to and including exp');
  t.is(signer.verify('GET', key, query, now + 61), 'the URL has expired');
  t.is(signer.verify('PUT', key, query, now), 'invalid signature', 'the method is signed');
  t.is(signer.verify('GET', `objects/ab/${'ac'.repeat(32)}`, query, now), 'invalid signature', 'the key is signed');
  for (const [field, value] of [['exp', String(now + 6000)], ['ct', 'text/html'], ['fn', 'b.png'], ['len', '5']]) {
    t.is(signer.verify('GET', key, { ...query, [field]: value }, now), 'invalid signature', `${field} is signed`);
  }
  t.is(signer.verify('GET', key, { ...query, sig: query.sig!.slice(0, -1) + (query.sig!.endsWith('A') ? 'B' : 'A') }, now), 'invalid signature');
  t.is(signer.verify('GET', '../../etc/passwd', query, now), 'malformed signed URL');
  t.is(signer.verify('GET', key, { exp: query.exp }, now), 'malformed signed URL');
  t.is(createUrlSigner(randomBytes(32)).verify('GET', key, query, now), 'invalid signature', 'another secret');
});

test('through the edge: the URL works without a credential; tampered or expired URLs get 403 in shape A', async (t) => {
  const user = await p.newUser();
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: (await solidImage('png', 6, 6, 5)).toString('base64') }, filename: 'f.png' });
  t.is(up.status, 201, JSON.stringify(up.body));
  const url = new URL(up.body.url);
  t.is(url.origin, p.url, 'the URL points at the edge');
  t.is((await fetch(url)).status, 200);
  // Every /v1/ path is also served under /llm, a signed URL's too, and it stays public there.
  const aliased = new URL(url);
  aliased.pathname = `/llm${url.pathname}`;
  t.is((await fetch(aliased)).status, 200);

  const variants: Array<[string, (u: URL) => void]> = [
    ['signature', (u) => u.searchParams.set('sig', `${u.searchParams.get('sig')!.slice(0, -2)}xx`)],
    ['expiry pushed later', (u) => u.searchParams.set('exp', String(Number(u.searchParams.get('exp')) + 3600))],
    ['content type', (u) => u.searchParams.set('ct', 'text/html')],
    ['file name', (u) => u.searchParams.set('fn', 'evil.html')],
    ['object key', (u) => (u.pathname = u.pathname.replace(/[0-9a-f]$/, (c) => (c === '0' ? '1' : '0')))],
    ['signature removed', (u) => u.searchParams.delete('sig')],
  ];
  for (const [what, change] of variants) {
    const tampered = new URL(url);
    change(tampered);
    const res = await fetch(tampered);
    const body = (await res.json()) as any;
    t.is(res.status, 403, what);
    t.is(body.error.type, 'permission_error', what);
    t.truthy(body.error.request_id, what);
  }
  // The download URL cannot be used to upload.
  t.is((await fetch(url, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: 'x' })).status, 403);
  // A path outside the object namespace.
  t.is((await fetch(`${p.url}/v1/media/signed/uploads/..%2F..%2Fmaster.key?exp=9999999999&ct=x&sig=x`)).status, 403);

  // Expiry: the default lifetime is 900 s; a second past it the URL is refused.
  clock.advance(901_000);
  const expired = await fetch(url);
  t.is(expired.status, 403);
  t.regex(((await expired.json()) as any).error.message, /expired/);
});

test('the filesystem driver: a write that cannot land leaves no temporary file, and the next one to that key lands', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'media-test-fs-'));
  try {
    const storage = createFilesystemStorage({ root, publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock });
    const key = `objects/cd/${'cd'.repeat(32)}`;
    // A directory with something in it where the object should go: the rename onto it fails.
    await mkdir(join(root, key, 'occupied'), { recursive: true });
    await t.throwsAsync(storage.put(key, Buffer.from('image bytes'), 'image/png'));
    t.deepEqual((await readdir(join(root, 'objects', 'cd'))).filter((name) => name.endsWith('.tmp')), []);
    await rm(join(root, key), { recursive: true });
    await storage.put(key, Buffer.from('image bytes'), 'image/png');
    t.is((await storage.read(key, 100))?.toString(), 'image bytes');
    t.deepEqual(await readdir(join(root, 'objects', 'cd')), ['cd'.repeat(32)]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
