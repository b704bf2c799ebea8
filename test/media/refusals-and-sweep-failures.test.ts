import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import S3rver from 's3rver';
import sharp from 'sharp';
import { ApiError, ManualClock, unixSeconds } from '../../services/kit/index.js';
import { startS3FaultProxy } from '../helpers/s3-fault-proxy.js';
import {
  createDecodeSlots,
  createMediaStore,
  createS3Storage,
  finalizeUpload,
  mediaMigrations,
  newMediaId,
  objectKey,
  sanitizeImage,
  sweep,
  uploadKey,
  type IngestDeps,
  type MediaRow,
  type ObjectStorage,
  type SanitizeLimits,
} from '../../domains/media/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { createTestUser } from '../helpers/users.js';
import { phonePhoto, solidImage } from './fixtures.js';
import { postJson, startMediaPlatform } from './harness.js';

// Two ways a direct upload or the housekeeping could get stuck for good, on a real S3-protocol
// server (s3rver) and real PostgreSQL:
// - a completed upload refused for good at finalisation (over quota, a staging object over the
//   size limit) stayed `completing` with its staging object, and every sweep retried it; 100 of
//   them filled the sweep's batch and real stuck uploads were never finished;
// - one staging object whose delete kept failing aborted every sweep at that object, so nothing
//   after it was ever cleaned.
// A delete that keeps failing is S3 answering 403 AccessDenied for that one key (what an object
// under a retention lock, or a bucket policy denying the delete, answers): an HTTP proxy in front of
// s3rver refuses DELETE of the keys in `lockedKeys`. An unreachable store is the TCP fault proxy.
const BUCKET = 'media-refusals';
const KEY_ID = 'S3RVER';
const SECRET = 'S3RVER';
const clock = new ManualClock(Date.UTC(2026, 11, 1, 12, 0, 0));
type Runtime = Awaited<ReturnType<typeof openTestRuntime>>;
let runtime: Runtime;
let s3: S3rver;
let s3Dir: string;
let s3Endpoint: string;
let proxy: Awaited<ReturnType<typeof startS3FaultProxy>>;
let proxyEndpoint: string;
const lockedKeys = new Set<string>();
let refusedDeletes = 0;

test.before(async () => {
  runtime = await openTestRuntime({ migrations: [mediaMigrations], clock, bus: 'pg' });
  s3Dir = await mkdtemp(join(tmpdir(), 's3rver-refusals-'));
  s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: s3Dir, configureBuckets: [{ name: BUCKET }] });
  const upstream = await s3.run();
  s3Endpoint = `http://127.0.0.1:${upstream.port}`;
  proxy = await startS3FaultProxy(upstream.port, (req) => {
    const key = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).replace(`/${BUCKET}/`, '');
    if (req.method !== 'DELETE' || !lockedKeys.has(key)) return null;
    refusedDeletes++;
    return { status: 403, code: 'AccessDenied', message: 'Access Denied because object protected by object lock.' };
  });
  proxyEndpoint = proxy.endpoint;
});
test.after.always(async () => {
  await runtime?.dispose();
  await proxy?.close();
  await s3?.close();
  if (s3Dir) await rm(s3Dir, { recursive: true, force: true });
});

const LIMITS: SanitizeLimits = { maxBytes: 5_000_000, maxPixels: 10_000_000, allowedTypes: ['image/jpeg', 'image/png', 'image/webp', 'image/gif'], jpegQuality: 90 };

function logSink() {
  const lines: Array<Record<string, unknown>> = [];
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) {
        raw.push(line);
        lines.push(JSON.parse(line));
      }
      done();
    },
  });
  return { lines, raw, logger: pino({ level: 'info' }, sink) };
}

/** Pipeline deps on S3 behind the key-refusing proxy (or `endpoint`), with a captured log. */
function depsFor(options: { quotaBytes?: number; limits?: Partial<SanitizeLimits>; endpoint?: string } = {}) {
  const storage: ObjectStorage = createS3Storage({
    endpoint: options.endpoint ?? proxyEndpoint,
    bucket: BUCKET,
    region: 'us-east-1',
    accessKeyId: KEY_ID,
    secretAccessKey: SECRET,
    forcePathStyle: true,
    clock,
    connectTimeoutMs: 500,
    requestTimeoutMs: 2000,
  });
  const log = logSink();
  const deps: IngestDeps = {
    store: createMediaStore(runtime.db.knex),
    storage,
    clock,
    limits: { ...LIMITS, ...options.limits },
    quotaBytes: options.quotaBytes ?? 0,
    withSlot: createDecodeSlots(2),
    logger: log.logger,
  };
  return { deps, log, storage };
}

const now = () => unixSeconds(clock);

async function insertReservation(deps: IngestDeps, userId: string, state: MediaRow['state'], expiresIn: number, staging: Buffer | null, mimeType = 'image/jpeg'): Promise<string> {
  const id = newMediaId(clock);
  await deps.store.insert(runtime.db.knex, {
    id, user_id: userId, state, sha256: null, mime_type: mimeType, bytes: staging?.length ?? 10, width: null, height: null,
    filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now(), expires_at: now() + expiresIn,
  });
  if (staging) await deps.storage.put(uploadKey(id), staging, mimeType);
  return id;
}

async function refusal(t: any, promise: Promise<unknown>): Promise<ApiError> {
  const error = await t.throwsAsync(promise);
  t.true(error instanceof ApiError, String(error));
  return error as ApiError;
}

test.serial('a completed upload over quota: 413 naming id, and its staging object and reservation go, so no sweep retries it', async (t) => {
  const { deps, storage } = depsFor({ quotaBytes: 100 });
  try {
    const user = await createTestUser(runtime.db.knex);
    const photo = await phonePhoto();
    t.true((await sanitizeImage(photo, LIMITS)).data.length > 100, 'the stored photo alone is over the quota');
    const id = await insertReservation(deps, user.id, 'completing', 60, photo);

    const error = await refusal(t, finalizeUpload(deps, id));
    t.is(error.status, 413);
    t.is(error.param, 'id');
    t.is(await deps.store.byId(id), null, 'the reservation is gone (its quota freed)');
    t.false(await storage.exists(uploadKey(id)), 'the staging object is gone');
    t.regex(error.message, /quota of 100 bytes.*the upload was discarded/, 'the message says so');

    // Once the reservation would have expired, the sweep has nothing of it left to retry.
    clock.advance(61_000);
    t.deepEqual((await deps.store.stuckCompleting(now(), 100)).filter((r) => r.id === id), []);
    t.like(await sweep(deps, 0), { finalized: 0, failed: 0 });
  } finally {
    await storage.close();
  }
});

test.serial('a completed upload whose staging object is over the size limit: 400 naming id, staging object and reservation go', async (t) => {
  const { deps, storage } = depsFor({ limits: { maxBytes: 1000 } });
  try {
    const user = await createTestUser(runtime.db.knex);
    const id = await insertReservation(deps, user.id, 'completing', 60, randomBytes(2000));
    const error = await refusal(t, finalizeUpload(deps, id));
    t.is(error.status, 400);
    t.is(error.param, 'id');
    t.regex(error.message, /exceeds the size limit of 1000 bytes/);
    t.is(await deps.store.byId(id), null);
    t.false(await storage.exists(uploadKey(id)));
  } finally {
    await storage.close();
  }
});

test.serial('a refusal racing a second finalisation ends the reservation it put back to pending, never a media it made ready', async (t) => {
  const { deps, storage } = depsFor();
  try {
    const user = await createTestUser(runtime.db.knex);
    // The other finalisation (the worker, on the event) read no staging object, the refusal having
    // removed it: it puts the reservation back to pending. Simulated once this one has read the bytes.
    const reverted = await insertReservation(deps, user.id, 'completing', 60, Buffer.from('not an image at all'));
    const racing: IngestDeps = { ...deps, checkpoint: (step) => (step === 'staging-read' ? deps.store.revertCompleting(reverted) : undefined) };
    const error = await refusal(t, finalizeUpload(racing, reverted));
    t.is(error.status, 400);
    t.is(await deps.store.byId(reverted), null, 'the refused reservation is gone, though it was pending again');
    t.false(await storage.exists(uploadKey(reverted)));

    // The other finalisation read the earlier bytes (an S3 upload URL can write again) and made it
    // ready: the refusal of the later bytes leaves that media alone.
    const made = await insertReservation(deps, user.id, 'completing', 60, Buffer.from('not an image either'));
    const image = await sanitizeImage(await solidImage('png', 8, 8, 81), LIMITS);
    const madeReady: IngestDeps = {
      ...deps,
      checkpoint: async (step) => {
        if (step !== 'staging-read') return;
        await runtime.db.knex('media').where({ id: made }).update({ state: 'ready', sha256: image.sha256, mime_type: image.mimeType, bytes: image.data.length, width: 8, height: 8, expires_at: null });
      },
    };
    t.is((await refusal(t, finalizeUpload(madeReady, made))).status, 400);
    t.like(await deps.store.byId(made), { state: 'ready', sha256: image.sha256 });
  } finally {
    await storage.close();
  }
});

test.serial('100 refused uploads in the sweep\'s batch no longer keep a real stuck upload from being finished', async (t) => {
  const { deps, storage } = depsFor({ limits: { maxBytes: 100_000 } });
  try {
    const user = await createTestUser(runtime.db.knex);
    const refused: string[] = [];
    const tooLarge = randomBytes(100_001);
    for (let i = 0; i < 100; i++) refused.push(await insertReservation(deps, user.id, 'completing', 60, tooLarge));
    const image = await solidImage('png', 12, 12, 61);
    const stuck = await insertReservation(deps, user.id, 'completing', 60, image, 'image/png');
    clock.advance(61_000);

    const first = await sweep(deps, 0);
    const left = await runtime.db.knex('media').whereIn('id', refused).count<{ n: string }[]>({ n: '*' });
    t.is(Number(left[0]!.n), 0, 'every refused upload has ended');
    t.is(first.failed, 0, 'a refusal is settled, not a failure');
    for (const id of refused.slice(0, 5)) t.false(await storage.exists(uploadKey(id)));

    // The batch is free again: the real stuck upload is finished (by this sweep or the next).
    const second = await sweep(deps, 0);
    t.is(first.finalized + second.finalized, 1);
    t.like(await deps.store.byId(stuck), { state: 'ready', upload_key: null });
    t.false(await storage.exists(uploadKey(stuck)));
  } finally {
    await storage.close();
  }
});

test.serial('one staging object whose delete keeps failing: the sweep expires every other reservation, and logs and counts the failure', async (t) => {
  const { deps, log, storage } = depsFor();
  try {
    const user = await createTestUser(runtime.db.knex);
    // The failing one expires first, so it is the first of the batch.
    const locked = await insertReservation(deps, user.id, 'pending', 5, Buffer.from('half an upload'));
    const others = [await insertReservation(deps, user.id, 'pending', 6, Buffer.from('another')), await insertReservation(deps, user.id, 'pending', 7, Buffer.from('a third'))];
    lockedKeys.add(uploadKey(locked));
    const refusedBefore = refusedDeletes;
    clock.advance(10_000);

    const result = await sweep(deps, 0);
    t.true(refusedDeletes > refusedBefore, 'the store did refuse the delete');
    t.is(result.expired, 2);
    t.is(result.failed, 1);
    for (const id of others) {
      t.is(await deps.store.byId(id), null, 'expired despite the failure before it');
      t.false(await storage.exists(uploadKey(id)));
    }
    t.like(await deps.store.byId(locked), { state: 'pending' }, 'kept for the next sweep (its staging object first, then the row)');
    t.true(await storage.exists(uploadKey(locked)));

    const item = log.lines.find((l) => l.media_id === locked);
    t.truthy(item, 'the failing item is logged with its media id');
    t.is(item!.level, 40);
    t.regex(String(item!.err), /AccessDenied/);
    const summary = log.lines.find((l) => l.failed === 1);
    t.like(summary, { level: 40, expired: 2 });
    for (const line of log.raw) {
      t.false(line.includes(SECRET), 'no credential in the log');
      t.false(/x-amz-signature|authorization/i.test(line), 'no signature or credential header in the log');
    }

    // Once the store lets it go, the next sweep expires it.
    lockedKeys.delete(uploadKey(locked));
    t.like(await sweep(deps, 0), { expired: 1, failed: 0 });
    t.is(await deps.store.byId(locked), null);
    t.false(await storage.exists(uploadKey(locked)));
  } finally {
    lockedKeys.clear();
    await storage.close();
  }
});

test.serial('a failing delete in the later steps (finalised upload\'s leftover, unreferenced object, expired upload URL\'s key) skips that item only', async (t) => {
  const { deps, log, storage } = depsFor();
  const knex = runtime.db.knex;
  try {
    const user = await createTestUser(knex);
    // Two ready media whose staging object is still there (finalisation stopped before removing it).
    const leftovers: string[] = [];
    for (const seed of [71, 72]) {
      const image = await sanitizeImage(await solidImage('png', 8, 8, seed), LIMITS);
      const id = newMediaId(clock);
      await deps.store.touchObject(image.sha256, image.data.length, image.mimeType, new Date(clock.now()));
      await deps.storage.put(objectKey(image.sha256), image.data, image.mimeType);
      await deps.store.insert(knex, {
        id, user_id: user.id, state: 'ready', sha256: image.sha256, mime_type: image.mimeType, bytes: image.data.length, width: 8, height: 8,
        filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now(), expires_at: null,
      });
      await deps.storage.put(uploadKey(id), Buffer.from('staging'), 'image/png');
      leftovers.push(id);
    }
    // Two objects nothing references.
    const orphans: string[] = [];
    for (const seed of [73, 74]) {
      const image = await sanitizeImage(await solidImage('png', 8, 8, seed), LIMITS);
      await deps.store.touchObject(image.sha256, image.data.length, image.mimeType, new Date(clock.now()));
      await deps.storage.put(objectKey(image.sha256), image.data, image.mimeType);
      orphans.push(image.sha256);
    }
    // Two keys of upload URLs that have expired, with no reservation left.
    const dueKeys = [uploadKey(newMediaId(clock)), uploadKey(newMediaId(clock))];
    for (const key of dueKeys) {
      await deps.store.rememberStaging(knex, key, now());
      await deps.storage.put(key, Buffer.from('late write'), 'image/png');
    }
    clock.advance(1000);
    for (const key of [uploadKey(leftovers[0]!), objectKey(orphans[0]!), dueKeys[0]!]) lockedKeys.add(key);

    const result = await sweep(deps, 0);
    t.is(result.failed, 3);
    t.is(result.collected, 1);
    t.like(await deps.store.byId(leftovers[1]!), { upload_key: null });
    t.false(await storage.exists(uploadKey(leftovers[1]!)));
    t.false(await deps.store.objectExists(orphans[1]!));
    t.false(await storage.exists(objectKey(orphans[1]!)));
    t.false(await storage.exists(dueKeys[1]!));
    t.deepEqual(await knex('media_staging').whereIn('upload_key', dueKeys).pluck('upload_key'), [dueKeys[0]], 'only the failing key is still remembered');
    t.like(await deps.store.byId(leftovers[0]!), { upload_key: uploadKey(leftovers[0]!) });
    t.true(await deps.store.objectExists(orphans[0]!));
    t.truthy(log.lines.find((l) => l.media_id === leftovers[0] && l.level === 40));
    t.truthy(log.lines.find((l) => l.sha256 === orphans[0] && l.level === 40));
    t.truthy(log.lines.find((l) => l.upload_key === dueKeys[0] && l.level === 40));

    lockedKeys.clear();
    t.like(await sweep(deps, 0), { failed: 0, collected: 1 });
    t.like(await deps.store.byId(leftovers[0]!), { upload_key: null });
    t.false(await storage.exists(uploadKey(leftovers[0]!)));
    t.false(await deps.store.objectExists(orphans[0]!));
    t.false(await storage.exists(dueKeys[0]!));
    t.is((await knex('media_staging').whereIn('upload_key', dueKeys)).length, 0);
  } finally {
    lockedKeys.clear();
    await storage.close();
  }
});

test.serial('a store unreachable during a sweep: the sweep ends, counting each failure, and the next one cleans up', async (t) => {
  const fault: FaultProxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(s3Endpoint).port) });
  const { deps, storage } = depsFor({ endpoint: fault.url('http') });
  try {
    const user = await createTestUser(runtime.db.knex);
    const ids = [await insertReservation(deps, user.id, 'pending', 5, Buffer.from('one')), await insertReservation(deps, user.id, 'pending', 5, Buffer.from('two'))];
    clock.advance(10_000);
    fault.cut();
    const result = await sweep(deps, 0);
    t.true(result.failed >= 2, JSON.stringify(result));
    t.is(result.expired, 0);
    for (const id of ids) t.truthy(await deps.store.byId(id));

    fault.resume();
    t.like(await sweep(deps, 0), { expired: 2, failed: 0 });
    for (const id of ids) {
      t.is(await deps.store.byId(id), null);
      t.false(await storage.exists(uploadKey(id)));
    }
  } finally {
    await storage.close();
    await fault.close();
  }
});

test.serial('through the edge: a complete over quota is a 413 naming id; the reservation has ended, as for a refused image', async (t) => {
  // A JPEG saved at quality 10 grows when it is re-encoded at quality 90: its declared size fits the
  // quota, the stored image would not.
  const raw = await sharp(randomBytes(64 * 64 * 3), { raw: { width: 64, height: 64, channels: 3 } }).jpeg({ quality: 10 }).toBuffer();
  const stored = await sanitizeImage(raw, LIMITS);
  const quota = raw.length + 100;
  t.true(stored.data.length > quota, 'precondition: the sanitised image is over the quota');
  t.true(2 * raw.length > quota, 'precondition: two reservations of it do not fit');
  const s3Env = { S3_ENDPOINT: s3Endpoint, S3_BUCKET: BUCKET, S3_REGION: 'us-east-1', S3_ACCESS_KEY_ID: KEY_ID, S3_SECRET_ACCESS_KEY: SECRET, S3_FORCE_PATH_STYLE: 'true' };
  const p = await startMediaPlatform({ ...s3Env, MEDIA_SWEEP_INTERVAL_MS: '0', MEDIA_QUOTA_BYTES_PER_USER: String(quota) });
  const storage = createS3Storage({ endpoint: s3Endpoint, bucket: BUCKET, region: 'us-east-1', accessKeyId: KEY_ID, secretAccessKey: SECRET, forcePathStyle: true, clock });
  try {
    const user = await p.newUser();
    const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: raw.length });
    t.is(reserve.status, 201, JSON.stringify(reserve.body));
    const id = reserve.body.id;
    // fetch sets Content-Length from the body itself (the same value: the signed one).
    const { 'content-length': length, ...headers } = reserve.body.headers as Record<string, string>;
    t.is(length, String(raw.length));
    t.is((await fetch(reserve.body.upload_url, { method: 'PUT', headers, body: raw })).status, 200);

    const complete = await postJson(`${p.url}/v1/media/${id}/complete`, user.headers, {});
    t.is(complete.status, 413, JSON.stringify(complete.body));
    t.like(complete.body, { error: { type: 'invalid_request_error', code: 'payload_too_large', param: 'id' } });

    // Ended like a refused image: the id is unknown from now on, the staging object is gone…
    t.is((await postJson(`${p.url}/v1/media/${id}/complete`, user.headers, {})).status, 404);
    t.is((await fetch(`${p.url}/v1/media/${id}`, { headers: user.headers })).status, 404);
    t.is((await fetch(`${p.url}/v1/media/${id}`, { method: 'DELETE', headers: user.headers })).status, 404);
    t.false(await storage.exists(uploadKey(id)));
    t.is(await p.runtime.db.knex('media').where({ id }).first(), undefined);
    // …and it holds no quota: the same reservation fits again.
    const again = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/jpeg', bytes: raw.length });
    t.is(again.status, 201, JSON.stringify(again.body));
    // The 413's message tells the client to upload again, not to retry the complete.
    t.regex(complete.body.error.message, /the upload was discarded: delete media to free space, then upload it again/);
  } finally {
    await storage.close();
    await p.stop();
  }
});
