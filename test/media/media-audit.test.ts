import { randomBytes } from 'node:crypto';
import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import S3rver from 's3rver';
import {
  createDecodeSlots,
  createFilesystemStorage,
  createMediaStore,
  createS3Storage,
  createUrlSigner,
  finalizeUpload,
  sweep,
  uploadKey,
  type IngestDeps,
  type ObjectStorage,
} from '../../domains/media/index.js';
import { ManualClock, unixSeconds } from '../../services/kit/index.js';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// A hostile user's inputs and an operator's leftovers, through the edge on the filesystem driver
// (and on S3, a real S3-protocol server started here): base64 sources, file names, and what a
// deletion or a completed direct upload leaves in storage.
let p: MediaPlatform;
let s3: S3rver;
let s3Endpoint: string;
let s3Dir: string;
const BUCKET = 'media-audit';

test.before(async () => {
  // No periodic sweep: what is left on disk is left by the request under test, not tidied behind it.
  p = await startMediaPlatform({ MEDIA_MAX_BYTES: '400000', MEDIA_SWEEP_INTERVAL_MS: '0' });
  s3Dir = await mkdtemp(join(tmpdir(), 's3rver-audit-'));
  s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: s3Dir, configureBuckets: [{ name: BUCKET }] });
  s3Endpoint = `http://127.0.0.1:${(await s3.run()).port}`;
});
test.after.always(async () => {
  await p?.stop();
  await s3?.close();
  if (s3Dir) await rm(s3Dir, { recursive: true, force: true });
});

const upload = (headers: Record<string, string>, body: unknown) => postJson(`${p.url}/v1/media/upload`, headers, body);
const exists = (path: string) => access(path).then(() => true, () => false);

function expectError(t: any, res: { status: number; body: any }, status: number, param: string, message: RegExp) {
  t.is(res.status, status, JSON.stringify(res.body));
  t.is(res.body.error?.param, param);
  t.regex(res.body.error?.message ?? '', message);
}

test('a base64 source holding a whole data URL is decoded like a data_url source; its claimed type is ignored', async (t) => {
  const user = await p.newUser();
  const gif = await solidImage('gif', 7, 5, 90);
  const res = await upload(user.headers, { source: { type: 'base64', data: `data:image/png;base64,${gif.toString('base64')}`, mime_type: 'image/jpeg' } });
  t.is(res.status, 201, JSON.stringify(res.body));
  t.like(res.body, { mime_type: 'image/gif', width: 7, height: 5 });
  // Leading whitespace and line-wrapped base64 (as MIME encoders write it) are fine in both sources.
  const png = await solidImage('png', 6, 6, 91);
  const wrapped = png.toString('base64').replace(/(.{20})/g, '$1\r\n');
  const byDataUrl = await upload(user.headers, { source: { type: 'data_url', data_url: `\n data:image/png;base64,${wrapped}` } });
  t.is(byDataUrl.status, 201, JSON.stringify(byDataUrl.body));
  // A data URL that is not base64 inside a base64 source is refused naming that field.
  expectError(t, await upload(user.headers, { source: { type: 'base64', data: 'data:image/png,%89PNG' } }), 400, 'source.data', /data URL/);
});

test('base64 padding must complete the last group when present: a stray or short = is a 400 naming the field', async (t) => {
  const user = await p.newUser();
  const png = await solidImage('png', 5, 5, 92);
  const ok = await upload(user.headers, { source: { type: 'base64', data: png.toString('base64').replace(/=+$/, '') } });
  t.is(ok.status, 201, 'unpadded base64 is accepted');
  // 3 characters + "==", 2 + "=", 4 + "=": each decodes to something, but is not base64.
  for (const data of ['QUI==', 'QQ=', 'QUJD=', `${png.toString('base64').replace(/=+$/, '')}===`]) {
    expectError(t, await upload(user.headers, { source: { type: 'base64', data } }), 400, 'source.data', /not valid base64/);
  }
  expectError(t, await upload(user.headers, { source: { type: 'data_url', data_url: 'data:image/png;base64,QUJD=' } }), 400, 'source.data_url', /not valid base64/);
});

test('a file name that is only "." or ".." after the last separator is no name (JSON and multipart)', async (t) => {
  const user = await p.newUser();
  const json = await upload(user.headers, { source: { type: 'base64', data: (await solidImage('png', 4, 4, 93)).toString('base64') }, filename: 'photos/..' });
  t.is(json.status, 201, JSON.stringify(json.body));
  t.is(json.body.filename, null);
  const form = new FormData();
  form.append('file', new Blob([await solidImage('png', 4, 5, 94)]), '..');
  const multipart = await fetch(`${p.url}/v1/media/upload`, { method: 'POST', headers: user.headers, body: form });
  const body = (await multipart.json()) as any;
  t.is(multipart.status, 201, JSON.stringify(body));
  t.is(body.filename, null);
  // The download URL then carries no name either.
  t.false(new URL(body.url).searchParams.has('fn'));
});

test('deleting a direct upload whose finalisation stopped before removing its staging object removes that object too', async (t) => {
  const user = await p.newUser();
  const image = await solidImage('png', 9, 7, 95);
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: image.length });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  const id = reserve.body.id as string;
  const put = await fetch(reserve.body.upload_url, { method: 'PUT', headers: reserve.body.headers, body: image });
  t.is(put.status, 200);
  const staging = join(p.dataDir, 'media', 'uploads', id);
  t.true(await exists(staging));

  // The process completing it stops right after the commit (before the staging object goes):
  // the same steps `POST /complete` runs, over the platform's database and media directory.
  const knex = p.runtime.db.knex;
  const store = createMediaStore(knex);
  const deps: IngestDeps = {
    store,
    storage: createFilesystemStorage({ root: join(p.dataDir, 'media'), publicUrl: () => p.url, signer: createUrlSigner(randomBytes(32)), clock: p.runtime.clock }),
    clock: p.runtime.clock,
    limits: { maxBytes: 400_000, maxPixels: 50_000_000, allowedTypes: ['image/png'], jpegQuality: 90 },
    quotaBytes: 0,
    withSlot: createDecodeSlots(1),
    checkpoint: (step) => {
      if (step === 'committed') throw new Error('process stopped');
    },
  };
  const owner = (await store.byId(id))!.user_id;
  t.true(await store.transaction((trx) => store.claimPending(trx, id, owner, unixSeconds(p.runtime.clock))));
  await t.throwsAsync(finalizeUpload(deps, id), { message: 'process stopped' });
  t.like(await store.byId(id), { state: 'ready', upload_key: `uploads/${id}` });
  t.true(await exists(staging), 'the staging object is still there');

  const deleted = await fetch(`${p.url}/v1/media/${id}`, { method: 'DELETE', headers: user.headers });
  t.is(deleted.status, 200, await deleted.text());
  t.is(await store.byId(id), null);
  t.false(await exists(staging), 'no staging object is left that nothing would ever collect');
});

test('DELETE of an open direct-upload reservation cancels it: its staging object and its quota go, complete and the upload URL refuse it', async (t) => {
  const user = await p.newUser();
  const image = await solidImage('png', 8, 8, 96);
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: image.length });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  const id = reserve.body.id as string;
  t.is((await fetch(reserve.body.upload_url, { method: 'PUT', headers: reserve.body.headers, body: image })).status, 200);
  const staging = join(p.dataDir, 'media', 'uploads', id);
  t.true(await exists(staging));
  t.like(await p.runtime.db.knex('media').where({ id }).first(), { state: 'pending' });

  const deleted = await fetch(`${p.url}/v1/media/${id}`, { method: 'DELETE', headers: user.headers });
  t.is(deleted.status, 200, await deleted.clone().text());
  t.deepEqual(await deleted.json(), { id, object: 'media.deleted', deleted: true });
  t.false(await exists(staging), 'the staging object is gone at once, not at the reservation\'s expiry');
  t.is(await p.runtime.db.knex('media').where({ id }).first(), undefined, 'the reservation no longer holds quota');
  t.is((await postJson(`${p.url}/v1/media/${id}/complete`, user.headers, {})).status, 404);
  t.is((await fetch(reserve.body.upload_url, { method: 'PUT', headers: reserve.body.headers, body: image })).status, 403);
  t.false(await exists(staging), 'the upload URL writes nothing once it is cancelled');
  t.is((await fetch(`${p.url}/v1/media/${id}`, { method: 'DELETE', headers: user.headers })).status, 404);

  // Another user cannot cancel someone's reservation: 404, and it stays open.
  const other = await p.newUser();
  const second = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: image.length });
  const refused = await fetch(`${p.url}/v1/media/${second.body.id}`, { method: 'DELETE', headers: other.headers });
  t.is(refused.status, 404);
  t.is(((await refused.json()) as any).error.param, 'id');
  t.is((await fetch(second.body.upload_url, { method: 'PUT', headers: second.body.headers, body: image })).status, 200);
  t.is((await postJson(`${p.url}/v1/media/${second.body.id}/complete`, user.headers, {})).status, 201);
});

test('S3: a presigned upload URL that writes again after its reservation was completed or cancelled leaves nothing once it has expired', async (t) => {
  const s3Env = { S3_ENDPOINT: s3Endpoint, S3_BUCKET: BUCKET, S3_REGION: 'us-east-1', S3_ACCESS_KEY_ID: 'S3RVER', S3_SECRET_ACCESS_KEY: 'S3RVER', S3_FORCE_PATH_STYLE: 'true' };
  const onS3 = await startMediaPlatform({ ...s3Env, MEDIA_SWEEP_INTERVAL_MS: '0', MEDIA_UPLOAD_TTL_SECONDS: '600' });
  const clock = new ManualClock(onS3.runtime.clock.now());
  const storage: ObjectStorage = createS3Storage({ endpoint: s3Endpoint, bucket: BUCKET, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', forcePathStyle: true, clock });
  try {
    const user = await onS3.newUser();
    const image = await solidImage('png', 10, 6, 97);
    const completed = await postJson(`${onS3.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: image.length });
    const cancelled = await postJson(`${onS3.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: image.length });
    for (const r of [completed, cancelled]) {
      t.is(r.status, 201, JSON.stringify(r.body));
      t.is((await fetch(r.body.upload_url, { method: 'PUT', headers: r.body.headers, body: image })).status, 200);
    }
    t.is((await postJson(`${onS3.url}/v1/media/${completed.body.id}/complete`, user.headers, {})).status, 201);
    t.is((await fetch(`${onS3.url}/v1/media/${cancelled.body.id}`, { method: 'DELETE', headers: user.headers })).status, 200);
    for (const r of [completed, cancelled]) t.false(await storage.exists(uploadKey(r.body.id)), 'the staging object went with the reservation');

    // A presigned URL cannot be revoked: until it expires, it writes again, and no record names that key.
    for (const r of [completed, cancelled]) {
      t.is((await fetch(r.body.upload_url, { method: 'PUT', headers: r.body.headers, body: image })).status, 200);
      t.true(await storage.exists(uploadKey(r.body.id)));
    }
    const deps: IngestDeps = {
      store: createMediaStore(onS3.runtime.db.knex),
      storage,
      clock,
      limits: { maxBytes: 400_000, maxPixels: 50_000_000, allowedTypes: ['image/png'], jpegQuality: 90 },
      quotaBytes: 0,
      withSlot: createDecodeSlots(1),
    };
    // While the URL may still write, the sweep leaves the key alone (it would be written again)…
    await sweep(deps, 0);
    for (const r of [completed, cancelled]) t.true(await storage.exists(uploadKey(r.body.id)));
    // …once it has expired (and the margin for clock skew has passed), the key goes.
    clock.advance((600 + 301) * 1000);
    await sweep(deps, 0);
    for (const r of [completed, cancelled]) t.false(await storage.exists(uploadKey(r.body.id)), 'nothing is left in the bucket');
    // The completed media itself is untouched.
    const got = await fetch(`${onS3.url}/v1/media/${completed.body.id}/content`, { headers: user.headers });
    t.is(got.status, 200);
  } finally {
    await storage.close();
    await onS3.stop();
  }
});
