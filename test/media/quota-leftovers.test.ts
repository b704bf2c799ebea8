import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import S3rver from 's3rver';
import { ApiError, MAX_HANDLER_FAILURES, ManualClock, unixSeconds, type BusMessage, type Delivery, type EventMessage } from '../../services/kit/index.js';
import {
  MEDIA_OBJECT_UNREFERENCED,
  MEDIA_UPLOAD_COMPLETED,
  createDecodeSlots,
  createMediaStore,
  createS3Storage,
  finalizeUpload,
  mediaMigrations,
  newMediaId,
  objectKey,
  sanitizeImage,
  storeImage,
  uploadKey,
  checkQuota,
  type MediaRow,
  type SanitizedImage,
  type SanitizeLimits,
} from '../../domains/media/index.js';
import { createMediaDedup, type MediaDedupDeps } from '../../workers/media-dedup/index.js';
import { startS3FaultProxy, type S3Refusal } from '../helpers/s3-fault-proxy.js';
import { openTestRuntime } from '../helpers/env.js';
import { untilSettled } from '../helpers/settle.js';
import { createTestUser } from '../helpers/users.js';
import { noisePng, solidImage } from './fixtures.js';

// On a real S3-protocol server (s3rver, behind a proxy that can answer S3 errors) and PostgreSQL,
// with a ManualClock:
// - an upload refused over quota wrote its object before the quota was checked, and only a sweep
//   (off with MEDIA_SWEEP_INTERVAL_MS=0) ever removed it; now the quota is checked before writing,
//   and an object left without a record (refused in the recording transaction, or the store
//   failing after the object's row was added) is handed to the worker, which collects it;
// - a direct-upload reservation past its expiry kept holding its quota until a sweep removed it;
// - the worker dead-lettered an event whose handling failed because S3 answered 503 SlowDown.
const BUCKET = 'media-quota-leftovers';
const clock = new ManualClock(Date.UTC(2026, 11, 2, 12, 0, 0));
const GRACE = 60;
type Runtime = Awaited<ReturnType<typeof openTestRuntime>>;
let runtime: Runtime;
let s3: S3rver;
let s3Dir: string;
let proxy: Awaited<ReturnType<typeof startS3FaultProxy>>;
/** What the proxy answers instead of forwarding, for requests `faultFor` matches. */
let fault: { match: (method: string, key: string) => boolean; refusal: S3Refusal } | null = null;
let refused = 0;

test.before(async () => {
  runtime = await openTestRuntime({ migrations: [mediaMigrations], clock, bus: 'pg' });
  s3Dir = await mkdtemp(join(tmpdir(), 's3rver-quota-'));
  s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: s3Dir, configureBuckets: [{ name: BUCKET }] });
  const upstream = await s3.run();
  proxy = await startS3FaultProxy(upstream.port, (req) => {
    const key = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).replace(`/${BUCKET}/`, '');
    if (!fault || !fault.match(req.method ?? '', key)) return null;
    refused++;
    return fault.refusal;
  });
});
test.after.always(async () => {
  await runtime?.dispose();
  await proxy?.close();
  await s3?.close();
  if (s3Dir) await rm(s3Dir, { recursive: true, force: true });
});

const LIMITS: SanitizeLimits = { maxBytes: 5_000_000, maxPixels: 10_000_000, allowedTypes: ['image/jpeg', 'image/png', 'image/webp', 'image/gif'], jpegQuality: 90 };
const SLOW_DOWN: S3Refusal = { status: 503, code: 'SlowDown', message: 'Please reduce your request rate.' };
const now = () => unixSeconds(clock);

/** Worker deps (a superset of the pipeline's) on s3rver behind the proxy; `checkpoint` injected. */
function depsFor(quotaBytes: number, checkpoint?: MediaDedupDeps['checkpoint']): MediaDedupDeps & { close(): Promise<void> } {
  const storage = createS3Storage({
    endpoint: proxy.endpoint,
    bucket: BUCKET,
    region: 'us-east-1',
    accessKeyId: 'S3RVER',
    secretAccessKey: 'S3RVER',
    forcePathStyle: true,
    clock,
    connectTimeoutMs: 500,
    requestTimeoutMs: 2000,
  });
  return {
    store: createMediaStore(runtime.db.knex),
    storage,
    clock,
    limits: LIMITS,
    quotaBytes,
    withSlot: createDecodeSlots(2),
    graceSeconds: GRACE,
    logger: runtime.logger.child({ test: 'quota-leftovers' }),
    checkpoint,
    close: () => storage.close(),
  };
}

async function insertReservation(deps: MediaDedupDeps, userId: string, state: MediaRow['state'], bytes: number, expiresIn: number, staging?: Buffer): Promise<string> {
  const id = newMediaId(clock);
  await deps.store.insert(runtime.db.knex, {
    id, user_id: userId, state, sha256: null, mime_type: 'image/png', bytes, width: null, height: null,
    filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now(), expires_at: now() + expiresIn,
  });
  if (staging) await deps.storage.put(uploadKey(id), staging, 'image/png');
  return id;
}

/** The `media.object.unreferenced` events recorded for `sha256`. */
async function unreferencedEvents(sha256: string): Promise<Array<{ sha256: string }>> {
  const rows: Array<{ data: unknown }> = await runtime.db.knex('outbox_events').where({ type: MEDIA_OBJECT_UNREFERENCED }).select('data');
  return rows.map((r) => (typeof r.data === 'string' ? JSON.parse(r.data) : r.data) as { sha256: string }).filter((d) => d.sha256 === sha256);
}

/** What the object store and the object table hold of `sha256`. */
async function objectState(deps: MediaDedupDeps, sha256: string) {
  return { row: await deps.store.objectExists(sha256), bytes: await deps.storage.exists(objectKey(sha256)) };
}

const event = (type: string, data: Record<string, unknown>, headers: Record<string, string> = {}): BusMessage<EventMessage> => ({
  id: 'evt_quota',
  routingKey: type,
  body: { id: 'evt_quota', type, occurred_at: new Date(clock.now()).toISOString(), data },
  headers,
  redelivered: false,
});

/** One delivery of `message` to the worker: what it did (`ack`, `retry`, `dead`). */
async function deliver(deps: MediaDedupDeps, message: BusMessage<EventMessage>): Promise<string[]> {
  const outcome: string[] = [];
  const delivery: Delivery = {
    ack: async () => void outcome.push('ack'),
    retryAfter: async () => void outcome.push('retry'),
    deadLetter: async () => void outcome.push('dead'),
  };
  await createMediaDedup(deps).handle(message, delivery);
  return outcome;
}

async function image(seed: number, size = 24): Promise<SanitizedImage> {
  return sanitizeImage(await noisePng(size + seed, size), LIMITS);
}

test.serial('an upload over quota is refused before anything is written: no object row, no object, no event', async (t) => {
  const small = await sanitizeImage(await solidImage('png', 8, 8, 1), LIMITS);
  const big = await image(1);
  const deps = depsFor(small.data.length + big.data.length - 1);
  try {
    const user = await createTestUser(runtime.db.knex);
    await storeImage(deps, user.id, small, null);
    const error = await t.throwsAsync(storeImage(deps, user.id, big, null, 'source.data'));
    t.true(error instanceof ApiError);
    t.like(error, { status: 413, param: 'source.data' });
    t.deepEqual(await objectState(deps, big.sha256), { row: false, bytes: false }, 'the refused image was never written');
    t.deepEqual(await unreferencedEvents(big.sha256), []);
    // The user's own repeat of bytes they hold costs no quota, so it is not refused.
    t.like(await storeImage(deps, user.id, small, null), { deduped: true });
  } finally {
    await deps.close();
  }
});

test.serial('a completed direct upload over quota is refused before its object is written; the reservation ends', async (t) => {
  const big = await noisePng(40, 40);
  const stored = await sanitizeImage(big, LIMITS);
  const deps = depsFor(stored.data.length - 1);
  try {
    const user = await createTestUser(runtime.db.knex);
    const id = await insertReservation(deps, user.id, 'completing', 10, 60, big);
    const error = await t.throwsAsync(finalizeUpload(deps, id));
    t.like(error, { status: 413, param: 'id' });
    t.regex(error!.message, /the upload was discarded/);
    t.is(await deps.store.byId(id), null, 'the reservation ended');
    t.false(await deps.storage.exists(uploadKey(id)), 'its staging object is gone');
    t.deepEqual(await objectState(deps, stored.sha256), { row: false, bytes: false }, 'the refused image was never written');
  } finally {
    await deps.close();
  }
});

test.serial('refused over quota in the recording transaction (after writing): the object is handed to the worker, which collects it after the grace period; a shared object stays', async (t) => {
  const mine = await image(2);
  const shared = await image(3);
  const user = await createTestUser(runtime.db.knex);
  const bob = await createTestUser(runtime.db.knex);
  // Between the write and the recording transaction, a reservation of the same user takes the
  // space (what a concurrent request does): the cheap check passed, the authoritative one refuses.
  const quota = Math.max(mine.data.length, shared.data.length) + 10;
  const deps = depsFor(quota, async (step) => {
    if (step === 'object-written') await insertReservation(deps, user.id, 'pending', quota, 600);
  });
  try {
    await storeImage({ ...deps, checkpoint: undefined }, bob.id, shared, null);
    for (const img of [mine, shared]) {
      const error = await t.throwsAsync(storeImage(deps, user.id, img, null));
      t.like(error, { status: 413, param: 'file' });
      t.deepEqual(await objectState(deps, img.sha256), { row: true, bytes: true }, 'written before the refusal');
      t.deepEqual(await unreferencedEvents(img.sha256), [{ sha256: img.sha256 }], 'handed to the worker');
      await runtime.db.knex('media').where({ user_id: user.id, state: 'pending' }).del();
    }
    t.deepEqual(await runtime.db.knex('media').where({ user_id: user.id }).select('id'), [], 'no record');

    // The worker: within the grace period the event comes back later; after it, the object goes.
    const message = event(MEDIA_OBJECT_UNREFERENCED, { sha256: mine.sha256 });
    t.deepEqual(await deliver(deps, message), ['retry']);
    t.deepEqual(await objectState(deps, mine.sha256), { row: true, bytes: true });
    clock.advance((GRACE + 1) * 1000);
    t.deepEqual(await deliver(deps, message), ['ack']);
    t.deepEqual(await objectState(deps, mine.sha256), { row: false, bytes: false }, 'collected without a sweep');
    // Bob's media references the shared object: nothing accepted is lost.
    t.deepEqual(await deliver(deps, event(MEDIA_OBJECT_UNREFERENCED, { sha256: shared.sha256 })), ['ack']);
    t.deepEqual(await objectState(deps, shared.sha256), { row: true, bytes: true });
  } finally {
    await deps.close();
  }
});

test.serial('the store failing after the object row was added: the object is handed to the worker, collected once the store is back', async (t) => {
  const img = await image(4);
  const deps = depsFor(0);
  try {
    const user = await createTestUser(runtime.db.knex);
    fault = { match: (method, key) => method === 'PUT' && key === objectKey(img.sha256), refusal: SLOW_DOWN };
    const before = refused;
    await t.throwsAsync(storeImage(deps, user.id, img, null), { name: 'SlowDown' });
    t.true(refused > before, 'the write reached the failing store');
    fault = null;
    t.true(await deps.store.objectExists(img.sha256), 'the object row was added before the write failed');
    t.deepEqual(await unreferencedEvents(img.sha256), [{ sha256: img.sha256 }]);
    clock.advance((GRACE + 1) * 1000);
    t.deepEqual(await deliver(deps, event(MEDIA_OBJECT_UNREFERENCED, { sha256: img.sha256 })), ['ack']);
    t.deepEqual(await objectState(deps, img.sha256), { row: false, bytes: false });
  } finally {
    fault = null;
    await deps.close();
  }
});

test.serial('a reservation past its expiry holds no quota, before any sweep; a completed upload being finalised still does', async (t) => {
  const img = await image(5);
  const deps = depsFor(img.data.length + 100);
  try {
    const user = await createTestUser(runtime.db.knex);
    const reservation = await insertReservation(deps, user.id, 'pending', 200, 10);
    await t.throwsAsync(storeImage(deps, user.id, img, null), { message: /would exceed your media quota/ }, 'the open reservation holds its bytes');
    await t.throwsAsync(deps.store.transaction((trx) => checkQuota(deps, trx, user.id, img.data.length, 'bytes')), { message: /\(200 bytes in use\)/ });
    clock.advance(10_000);
    t.truthy(await deps.store.byId(reservation), 'no sweep ran: the expired row is still there');
    await t.notThrowsAsync(deps.store.transaction((trx) => checkQuota(deps, trx, user.id, img.data.length, 'bytes')), 'a new reservation fits');
    const stored = await storeImage(deps, user.id, img, null);
    t.false(stored.deduped);

    // A completed upload (`completing`) counts at its declared size even past its expiry: it is
    // finalised (by the request, the worker's event or the sweep) or refused, never dropped.
    const other = await createTestUser(runtime.db.knex);
    await insertReservation(deps, other.id, 'completing', 200, 10);
    clock.advance(11_000);
    await t.throwsAsync(storeImage(deps, other.id, img, null), { message: /200 bytes in use/ });
  } finally {
    await deps.close();
  }
});

test.serial('S3 answering 503 SlowDown: the worker retries the event for as long as it lasts, never dead-letters it, and finalises it after', async (t) => {
  const deps = depsFor(0);
  try {
    const user = await createTestUser(runtime.db.knex);
    const png = await solidImage('png', 12, 12, 77);
    const id = await insertReservation(deps, user.id, 'completing', png.length, 600, png);
    fault = { match: () => true, refusal: SLOW_DOWN };
    const failingRounds = MAX_HANDLER_FAILURES + 2;
    let rounds = 0;
    const { handle } = createMediaDedup(deps);
    const outcomes = await untilSettled(
      async (message: BusMessage<EventMessage>, delivery: Delivery) => {
        if (++rounds > failingRounds) fault = null;
        await handle(message, delivery);
      },
      event(MEDIA_UPLOAD_COMPLETED, { media_id: id }),
      failingRounds + 5,
    );
    t.deepEqual(outcomes, [...Array<string>(failingRounds).fill('retry'), 'ack'], 'retried past MAX_HANDLER_FAILURES, then done');
    t.like(await deps.store.byId(id), { state: 'ready', width: 12, height: 12 });
  } finally {
    fault = null;
    await deps.close();
  }
});
