import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import { MAX_HANDLER_FAILURES, ManualClock, recordEvent, type BusMessage, type Delivery, type EventMessage } from '../../services/kit/index.js';
import {
  MEDIA_DELETED,
  MEDIA_UPLOAD_COMPLETED,
  collectObject,
  createDecodeSlots,
  createFilesystemStorage,
  createMediaStore,
  createUrlSigner,
  expireReservations,
  finalizeUpload,
  mediaMigrations,
  newMediaId,
  sanitize,
  storeImage,
  uploadKey,
  type MediaRow,
} from '../../domains/media/index.js';
import { createMediaDedup, mediaDedupWorker, type MediaDedupDeps } from '../../workers/media-dedup/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { createTestUser } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';
import { untilSettled } from '../helpers/settle.js';
import { completedUpload } from './completed-upload.js';
import { phonePhoto, solidImage } from './fixtures.js';

/**
 * Worker idempotency: a crash between each pair of steps (an injected failure at each checkpoint)
 * followed by the worker's retry leaves no orphan (no stored object without a record, no staging
 * object without a reservation, no object row without its bytes) and no duplicate record.
 */
type Runtime = Awaited<ReturnType<typeof openTestRuntime>>;
let runtime: Runtime;
let root: string;
const clock = new ManualClock(Date.now());

test.before(async () => {
  runtime = await openTestRuntime({ migrations: [mediaMigrations], clock, bus: 'pg', env: { MEDIA_SWEEP_INTERVAL_MS: '0', MEDIA_GC_GRACE_SECONDS: '60' } });
  root = await mkdtemp(join(tmpdir(), 'media-worker-'));
});
test.after.always(async () => {
  await runtime?.dispose();
  await rm(root, { recursive: true, force: true });
});

/** Deps over a fresh storage directory; `crashAt` throws once at that checkpoint. */
function depsFor(dir: string, crashAt?: string): MediaDedupDeps & { crashed: () => boolean } {
  let crashed = false;
  const storage = createFilesystemStorage({ root: dir, publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock });
  return {
    store: createMediaStore(runtime.db.knex),
    storage,
    clock,
    limits: { maxBytes: 5_000_000, maxPixels: 10_000_000, allowedTypes: ['image/jpeg', 'image/png', 'image/webp', 'image/gif'], jpegQuality: 90 },
    quotaBytes: 0,
    withSlot: createDecodeSlots(2),
    graceSeconds: 60,
    logger: runtime.logger,
    checkpoint: (step) => {
      if (step === crashAt && !crashed) {
        crashed = true;
        throw new Error(`injected crash at ${step}`);
      }
    },
    crashed: () => crashed,
  };
}

async function files(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    for (const entry of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) await walk(path);
      else out.push(relative(dir, path));
    }
  };
  await walk(dir);
  return out.sort();
}

/** Everything stored for `userId`, and every object row / file: what "no orphan" is checked against. */
async function inventory(dir: string, userId: string) {
  const knex = runtime.db.knex;
  const media = (await knex('media').where({ user_id: userId }).orderBy('id')) as MediaRow[];
  const objects = (await knex('media_objects').whereIn('sha256', media.map((m) => m.sha256).filter(Boolean) as string[])).map((o: { sha256: string }) => o.sha256);
  return { media, objects, files: await files(dir) };
}

function fakeDelivery() {
  const outcome: string[] = [];
  const delivery: Delivery = {
    ack: async () => void outcome.push('ack'),
    retryAfter: async () => void outcome.push('retry'),
    deadLetter: async () => void outcome.push('dead'),
  };
  return { delivery, outcome };
}

const event = (type: string, data: Record<string, unknown>): BusMessage<EventMessage> => ({
  id: 'evt_x',
  routingKey: type,
  body: { id: 'evt_x', type, occurred_at: new Date().toISOString(), data },
  headers: {},
  redelivered: false,
});

const FINALIZE_STEPS = ['staging-read', 'object-touched', 'object-written', 'committed'];

for (const step of FINALIZE_STEPS) {
  test.serial(`finalising a completed upload: a crash after "${step}", then the worker's retry → one ready media, no orphan`, async (t) => {
    const dir = join(root, `finalize-${step}`);
    const user = await createTestUser(runtime.db.knex);
    const deps = depsFor(dir, step);
    const id = await completedUpload(deps, runtime.db.knex, clock, user.id, await phonePhoto(), 'image/jpeg');
    await t.throwsAsync(finalizeUpload(deps, id), { message: `injected crash at ${step}` });
    t.true(deps.crashed());

    const { handle } = createMediaDedup(deps);
    const first = fakeDelivery();
    await handle(event(MEDIA_UPLOAD_COMPLETED, { media_id: id }), first.delivery);
    t.deepEqual(first.outcome, ['ack']);
    // A redelivery of the same event changes nothing.
    const second = fakeDelivery();
    await handle(event(MEDIA_UPLOAD_COMPLETED, { media_id: id }), second.delivery);
    t.deepEqual(second.outcome, ['ack']);

    const inv = await inventory(dir, user.id);
    t.is(inv.media.length, 1, 'no duplicate record');
    t.like(inv.media[0], { id, state: 'ready', upload_key: null, width: 20, height: 40 });
    t.deepEqual(inv.objects, [inv.media[0]!.sha256]);
    t.deepEqual(inv.files, [`objects/${inv.media[0]!.sha256!.slice(0, 2)}/${inv.media[0]!.sha256}`], 'only the content-addressed object remains');
  });
}

// A merging finalize writes no object (the user already has these bytes): the object checkpoints
// are reached only by the first upload, whose crash the client retries.
const MERGE_CRASHES = [
  ['staging-read', 'the merging finalize'],
  ['object-touched', 'the first upload'],
  ['object-written', 'the first upload'],
  ['committed', 'the merging finalize'],
] as const;
for (const [step, where] of MERGE_CRASHES) {
  test.serial(`finalising an upload that duplicates the user's media: a crash after "${step}" (in ${where}) → merged, one object, no orphan`, async (t) => {
    const dir = join(root, `merge-${step}`);
    const user = await createTestUser(runtime.db.knex);
    const deps = depsFor(dir, step);
    const bytes = await solidImage('jpeg', 16, 16, 7);
    const upload = async () => storeImage(deps, user.id, await sanitize(deps, bytes), null);
    if (where === 'the first upload') await t.throwsAsync(upload(), { message: `injected crash at ${step}` });
    const existing = await upload();
    const id = await completedUpload(deps, runtime.db.knex, clock, user.id, bytes, 'image/jpeg');
    if (where === 'the merging finalize') await t.throwsAsync(finalizeUpload(deps, id), { message: `injected crash at ${step}` });
    t.true(deps.crashed(), 'the crash was injected');
    const retried = await finalizeUpload(deps, id);
    t.like(retried, { deduped: true, row: { id: existing.row.id } });
    const inv = await inventory(dir, user.id);
    t.deepEqual(inv.media.filter((m) => m.state === 'ready').map((m) => m.id), [existing.row.id], 'one ready media');
    t.deepEqual(inv.media.find((m) => m.id === id)?.state, 'merged');
    t.deepEqual(inv.files, [`objects/${existing.row.sha256!.slice(0, 2)}/${existing.row.sha256}`]);
  });
}

// Each step's image is its own (a colour the file's other images do not use): the same bytes in two
// of these tests would be one shared object, referenced by the first test's record and never collected.
for (const [index, step] of ['object-touched', 'object-written'].entries()) {
  test.serial(`a direct upload crashing after "${step}" leaves an object the sweep collects; the retry creates one record`, async (t) => {
    const dir = join(root, `upload-${step}`);
    const user = await createTestUser(runtime.db.knex);
    const deps = depsFor(dir, step);
    const image = await sanitize(deps, await solidImage('png', 9, 9, 200 + index));
    await t.throwsAsync(storeImage(deps, user.id, image, null), { message: /injected crash/ });
    t.is((await inventory(dir, user.id)).media.length, 0);
    // Within the grace period the object is kept (an upload may be about to reference it)…
    const dedup = createMediaDedup(deps);
    await dedup.sweep();
    const kept = await files(dir);
    // …after it, the sweep collects whatever was written without a record.
    clock.advance(61_000);
    const swept = await dedup.sweep();
    t.true(swept.collected >= (kept.length > 0 ? 1 : 0));
    t.deepEqual(await files(dir), []);
    t.false(await deps.store.objectExists(image.sha256));
    // The client's retry stores it once.
    const stored = await storeImage(deps, user.id, image, null);
    const again = await storeImage(deps, user.id, image, null);
    t.is(again.row.id, stored.row.id);
    t.true(again.deduped);
    const inv = await inventory(dir, user.id);
    t.is(inv.media.length, 1);
    t.deepEqual(inv.files, [`objects/${image.sha256.slice(0, 2)}/${image.sha256}`]);
  });
}

test.serial('collecting a deleted media\'s object: a crash after the bytes are gone, then the retry → the row goes too; a referenced object is never collected', async (t) => {
  const dir = join(root, 'collect');
  const [alice, bob] = [await createTestUser(runtime.db.knex), await createTestUser(runtime.db.knex)];
  const deps = depsFor(dir, 'object-deleted');
  const image = await sanitize(deps, await solidImage('png', 11, 11, 99));
  const a = await storeImage(deps, alice.id, image, null);
  const b = await storeImage(deps, bob.id, image, null);
  t.not(a.row.id, b.row.id);
  clock.advance(61_000);
  // Alice deletes hers: Bob still references the object, so it stays.
  await runtime.db.knex('media').where({ id: a.row.id }).del();
  t.false(await collectObject(deps, image.sha256, 60));
  t.is((await files(dir)).length, 1);
  // Bob deletes his: the collector removes the bytes, crashes before the row; the retry finishes.
  await runtime.db.knex('media').where({ id: b.row.id }).del();
  await t.throwsAsync(collectObject(deps, image.sha256, 60), { message: /injected crash/ });
  t.deepEqual(await files(dir), []);
  t.true(await deps.store.objectExists(image.sha256), 'the row survived the crash (rolled back)');
  t.true(await collectObject(deps, image.sha256, 60));
  t.false(await deps.store.objectExists(image.sha256));
  t.false(await collectObject(deps, image.sha256, 60), 'collecting again is a no-op');
});

test.serial('expiring a reservation never completed: a crash after its staging object is removed, then the retry → row gone', async (t) => {
  const dir = join(root, 'expire');
  const user = await createTestUser(runtime.db.knex);
  const deps = depsFor(dir, 'staging-expired');
  const id = newMediaId(clock);
  const now = Math.floor(clock.now() / 1000);
  await deps.store.insert(runtime.db.knex, {
    id, user_id: user.id, state: 'pending', sha256: null, mime_type: 'image/png', bytes: 10, width: null, height: null,
    filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now, expires_at: now + 5,
  });
  await deps.storage.put(uploadKey(id), Buffer.from('half an upload'), 'image/png');
  t.is(await expireReservations(deps), 0, 'not expired yet');
  clock.advance(6_000);
  await t.throwsAsync(expireReservations(deps), { message: /injected crash/ });
  t.deepEqual(await files(dir), []);
  t.truthy(await deps.store.byId(id));
  t.is(await expireReservations(deps), 1);
  t.is(await deps.store.byId(id), null);
  t.deepEqual(await files(dir), []);
});

test.serial('the worker on the bus finalises a completed upload that arrives by event', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const dir = join(root, 'bus');
  const deps = depsFor(dir);
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, await phonePhoto(), 'image/jpeg');
  const worker = await mediaDedupWorker.start({
    runtime: { ...runtime, config: { ...runtime.config, DATA_DIR: root, env: { ...runtime.config.env, DATA_DIR: root, MEDIA_SIGNING_SECRET: 'x'.repeat(32) } } },
    gatewaySecret: '',
    urls: { llmApi: '', responseApi: '', mediaApi: '', mcpTools: '' },
  });
  try {
    // The worker's storage is DATA_DIR/media: stage the upload there.
    const workerStorage = createFilesystemStorage({ root: join(root, 'media'), publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock });
    await workerStorage.put(uploadKey(id), (await deps.storage.read(uploadKey(id), 1e7))!, 'image/jpeg');
    await runtime.db.knex.transaction((trx) => recordEvent(trx, MEDIA_UPLOAD_COMPLETED, { media_id: id }));
    runtime.relay.kick();
    await runtime.relay.drain();
    const row = await waitFor(async () => {
      const current = await deps.store.byId(id);
      return current?.state === 'ready' ? current : null;
    }, 20_000, 'the completed upload finalised by the worker');
    t.is(row.width, 20);
    t.deepEqual(await files(join(root, 'media')), [`objects/${row.sha256!.slice(0, 2)}/${row.sha256}`]);
  } finally {
    await worker.stop();
  }
});

function logSink() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, logger: pino({ level: 'info' }, sink) };
}

test.serial('a media event that always fails is dead-lettered after MAX_HANDLER_FAILURES attempts, logged once as an error', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const deps = depsFor(join(root, 'poison'));
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, await phonePhoto(), 'image/jpeg');
  const { lines, logger } = logSink();
  const { handle } = createMediaDedup({
    ...deps,
    logger,
    checkpoint: (step) => {
      if (step === 'staging-read') throw new Error('always broken');
    },
  });
  const outcomes = await untilSettled(handle, event(MEDIA_UPLOAD_COMPLETED, { media_id: id }), MAX_HANDLER_FAILURES * 3);
  t.deepEqual(outcomes, [...Array<string>(MAX_HANDLER_FAILURES - 1).fill('retry'), 'dead']);
  const errors = lines.filter((l) => Number(l.level) >= 50);
  t.is(errors.length, 1, 'the dead letter is logged once');
  t.like(errors[0], { event: MEDIA_UPLOAD_COMPLETED, failures: MAX_HANDLER_FAILURES, err: 'always broken' });
  t.like(await deps.store.byId(id), { state: 'completing' }, 'nothing was half-done: the sweep can still finish it');
});

test.serial('a media event failing transiently is retried and then finalised', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const deps = depsFor(join(root, 'transient'));
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, await phonePhoto(), 'image/jpeg');
  let failures = 3;
  const { handle } = createMediaDedup({
    ...deps,
    checkpoint: (step) => {
      if (step === 'staging-read' && failures-- > 0) throw new Error('storage hiccup');
    },
  });
  const outcomes = await untilSettled(handle, event(MEDIA_UPLOAD_COMPLETED, { media_id: id }), MAX_HANDLER_FAILURES * 3);
  t.deepEqual(outcomes, ['retry', 'retry', 'retry', 'ack']);
  t.like(await deps.store.byId(id), { state: 'ready' });
});

test.serial('a media event failing because the database is unavailable is retried for as long as the outage lasts, never dead-lettered', async (t) => {
  const user = await createTestUser(runtime.db.knex);
  const deps = depsFor(join(root, 'outage'));
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, await phonePhoto(), 'image/jpeg');
  let failures = MAX_HANDLER_FAILURES * 2;
  const { handle } = createMediaDedup({
    ...deps,
    checkpoint: (step) => {
      if (step === 'staging-read' && failures-- > 0) throw Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' });
    },
  });
  const outcomes = await untilSettled(handle, event(MEDIA_UPLOAD_COMPLETED, { media_id: id }), MAX_HANDLER_FAILURES * 3);
  t.deepEqual(outcomes, [...Array<string>(MAX_HANDLER_FAILURES * 2).fill('retry'), 'ack']);
  t.like(await deps.store.byId(id), { state: 'ready' });
});

test.serial('a media deleted within the grace period of its object: the event comes back after the grace and collects it; a still-referenced object is acked at once', async (t) => {
  const dir = join(root, 'deleted-in-grace');
  const [alice, bob] = [await createTestUser(runtime.db.knex), await createTestUser(runtime.db.knex)];
  const deps = depsFor(dir);
  const { handle } = createMediaDedup(deps);
  const settle = async (data: Record<string, unknown>) => {
    const outcome: Array<string | number> = [];
    await handle(event(MEDIA_DELETED, data), {
      ack: async () => void outcome.push('ack'),
      retryAfter: async (delayMs) => void outcome.push('retry', delayMs),
      deadLetter: async () => void outcome.push('dead'),
    });
    return outcome;
  };

  // Shared bytes: Alice deletes hers while Bob still holds the object → settled, no retry.
  const shared = await sanitize(deps, await solidImage('png', 13, 13, 61));
  const a = await storeImage(deps, alice.id, shared, null);
  await storeImage(deps, bob.id, shared, null);
  await runtime.db.knex('media').where({ id: a.row.id }).del();
  t.deepEqual(await settle({ media_id: a.row.id, sha256: shared.sha256 }), ['ack']);
  t.true(await deps.store.objectExists(shared.sha256));

  // Alice uploads and deletes at once (MEDIA_SWEEP_INTERVAL_MS=0 here: events are the only collector).
  const image = await sanitize(deps, await solidImage('png', 13, 13, 62));
  const mine = await storeImage(deps, alice.id, image, null);
  await runtime.db.knex('media').where({ id: mine.row.id }).del();
  const first = await settle({ media_id: mine.row.id, sha256: image.sha256 });
  t.is(first[0], 'retry', 'the object is kept for its grace period, and the event comes back');
  t.true((first[1] as number) >= 60_000, 'not before the grace period is over');
  t.true(await deps.store.objectExists(image.sha256));
  clock.advance(61_000);
  t.deepEqual(await settle({ media_id: mine.row.id, sha256: image.sha256 }), ['ack']);
  t.false(await deps.store.objectExists(image.sha256));
  t.deepEqual(await files(dir), [`objects/${shared.sha256.slice(0, 2)}/${shared.sha256}`], 'only the object Bob references remains');
  // A redelivery after the collection changes nothing.
  t.deepEqual(await settle({ media_id: mine.row.id, sha256: image.sha256 }), ['ack']);
});
