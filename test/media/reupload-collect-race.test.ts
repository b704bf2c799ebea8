import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import {
  type MediaRow,
  collectObject,
  createDecodeSlots,
  createFilesystemStorage,
  createMediaStore,
  createUrlSigner,
  finalizeUpload,
  mediaMigrations,
  newMediaId,
  objectKey,
  sanitize,
  storeImage,
  uploadKey,
  type IngestDeps,
  type MediaStore,
} from '../../domains/media/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { createTestUser } from '../helpers/users.js';
import { completedUpload } from './completed-upload.js';
import { solidImage } from './fixtures.js';

/**
 * Uploading bytes the user already holds writes no object. If that copy is deleted and its object
 * collected between the upload's look and its recording transaction, the new media must still end
 * up with its object: the transaction holds the object's row and, finding it gone, writes the
 * object again. The interleaving is forced at the start of the recording transaction (before it
 * takes the user's lock).
 *
 * A delete still open (its row deleted, not committed) when the recording transaction checks for
 * the user's copy: the delete holds the user's lock, so the upload waits for it and then records a
 * media of its own, instead of answering (or merging a completed upload into) the copy whose object
 * is collected right after. The delete is held open until the upload waits for it (or, without
 * that lock, until the upload has finished without waiting).
 */
type Runtime = Awaited<ReturnType<typeof openTestRuntime>>;
let runtime: Runtime;
let root: string;
const GRACE = 60;
const clock = new ManualClock(Date.now());

test.before(async () => {
  runtime = await openTestRuntime({ migrations: [mediaMigrations], clock, bus: 'pg', env: { MEDIA_SWEEP_INTERVAL_MS: '0' } });
  root = await mkdtemp(join(tmpdir(), 'media-reupload-race-'));
});
test.after.always(async () => {
  await runtime?.dispose();
  await rm(root, { recursive: true, force: true });
});

/** Deps whose store runs `interleave` once, when a recording transaction is about to take the user's lock. */
function depsFor(dir: string): IngestDeps & { interleaveOnce(work: () => Promise<void>): void } {
  const store = createMediaStore(runtime.db.knex);
  let pending: (() => Promise<void>) | null = null;
  const wrapped: MediaStore = {
    ...store,
    async lockUser(trx, userId) {
      const work = pending;
      pending = null;
      if (work) await work();
      return store.lockUser(trx, userId);
    },
  };
  return {
    store: wrapped,
    storage: createFilesystemStorage({ root: dir, publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock }),
    clock,
    limits: { maxBytes: 5_000_000, maxPixels: 10_000_000, allowedTypes: ['image/jpeg', 'image/png', 'image/webp', 'image/gif'], jpegQuality: 90 },
    quotaBytes: 0,
    withSlot: createDecodeSlots(2),
    interleaveOnce(work) {
      pending = work;
    },
  };
}

/** Deletes the user's media (DELETE /v1/media/{id}) and runs the collector on its object, as the worker would. */
async function deleteAndCollect(deps: IngestDeps, userId: string, mediaId: string, sha256: string): Promise<boolean> {
  const deleted = await deps.store.transaction((trx) => deps.store.deleteReady(trx, userId, mediaId));
  if (!deleted) throw new Error('the first copy was not deleted');
  return collectObject(deps, sha256, GRACE);
}

async function objectState(deps: IngestDeps, sha256: string) {
  const bytes = await deps.storage.read(objectKey(sha256), 10_000_000).catch(() => null);
  return { row: await deps.store.objectExists(sha256), bytes: bytes ? bytes.length : 0 };
}

test.serial('a re-upload whose earlier copy is deleted and collected meanwhile still gets its object', async (t) => {
  const deps = depsFor(join(root, 'store'));
  const user = await createTestUser(runtime.db.knex);
  const image = await sanitize(deps, await solidImage('png', 8, 8, 11));
  const first = await storeImage(deps, user.id, image, 'a.png');
  clock.advance((GRACE + 1) * 1000); // the object's touch is older than the collector's grace period

  let collected: boolean | undefined;
  deps.interleaveOnce(async () => {
    collected = await deleteAndCollect(deps, user.id, first.row.id, image.sha256);
  });
  const second = await storeImage(deps, user.id, image, 'b.png');
  t.true(collected, 'the interleaving happened: the first copy was deleted and its object collected');
  t.like(second, { deduped: false, row: { state: 'ready', sha256: image.sha256 } });
  t.not(second.row.id, first.row.id);
  t.deepEqual(await objectState(deps, image.sha256), { row: true, bytes: image.data.length });
  // And the object is referenced now: a later collection leaves it alone.
  clock.advance((GRACE + 1) * 1000);
  t.false(await collectObject(deps, image.sha256, GRACE));
  t.deepEqual(await objectState(deps, image.sha256), { row: true, bytes: image.data.length });
});

test.serial('a finalised direct upload whose earlier copy is deleted and collected meanwhile becomes ready with its object', async (t) => {
  const deps = depsFor(join(root, 'finalize'));
  const user = await createTestUser(runtime.db.knex);
  const bytes = await solidImage('png', 8, 8, 23);
  const image = await sanitize(deps, bytes);
  const first = await storeImage(deps, user.id, image, 'a.png');
  clock.advance((GRACE + 1) * 1000);

  const id = newMediaId(clock);
  const now = Math.floor(clock.now() / 1000);
  await deps.store.insert(runtime.db.knex, {
    id, user_id: user.id, state: 'completing', sha256: null, mime_type: 'image/png', bytes: bytes.length, width: null, height: null,
    filename: null, upload_key: uploadKey(id), merged_into: null, created_at: now, expires_at: now + 900,
  });
  await deps.storage.put(uploadKey(id), bytes, 'image/png');

  let collected: boolean | undefined;
  deps.interleaveOnce(async () => {
    collected = await deleteAndCollect(deps, user.id, first.row.id, image.sha256);
  });
  const finalized = await finalizeUpload(deps, id);
  t.true(collected, 'the interleaving happened');
  t.like(finalized, { deduped: false, row: { id, state: 'ready', sha256: image.sha256 } });
  t.deepEqual(await objectState(deps, image.sha256), { row: true, bytes: image.data.length });
});

/** A promise with its resolver. */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * Resolves once another backend waits for a lock `pid` holds (pg_blocking_pids), or once `stop`
 * is called. A bounded poll on that condition, yielding between queries: no sleep.
 */
function someoneWaitsFor(pid: number) {
  let stopped = false;
  const waiting = (async () => {
    for (let i = 0; i < 20_000 && !stopped; i++) {
      const rows = await runtime.db.knex.raw('select count(*)::int as n from pg_stat_activity where ? = any(pg_blocking_pids(pid))', [pid]);
      if (rows.rows[0].n > 0) return true;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return false;
  })();
  return { waiting, stop: () => void (stopped = true) };
}

/**
 * Deletes `media` in a transaction held open after the row's delete until `upload` either waits for
 * it or settles without waiting; then commits it and runs the collector as the worker would on the
 * `media.deleted` event. `upload` is started once the delete is in flight.
 */
async function deleteDuring<T>(deps: IngestDeps, userId: string, media: MediaRow, upload: () => Promise<T>) {
  const started = deferred<number>();
  const release = deferred();
  const deletion = deps.store.transaction(async (trx) => {
    const pid = Number((await trx.raw('select pg_backend_pid() as pid')).rows[0].pid);
    const removed = await deps.store.deleteReady(trx, userId, media.id);
    started.resolve(pid);
    await release.promise;
    return removed;
  });
  const pid = await started.promise;
  const uploading = upload();
  const probe = someoneWaitsFor(pid);
  const waited = await Promise.race([probe.waiting, uploading.then(() => false, () => false)]);
  probe.stop();
  release.resolve();
  const removed = await deletion;
  const result = await uploading;
  const collected = await collectObject(deps, media.sha256!, GRACE);
  return { removed, result, waited, collected };
}

test.serial('a re-upload racing the delete of the copy it would deduplicate to gets a media of its own, with its object', async (t) => {
  const deps = depsFor(join(root, 'delete-race'));
  const user = await createTestUser(runtime.db.knex);
  const image = await sanitize(deps, await solidImage('png', 8, 8, 31));
  const first = await storeImage(deps, user.id, image, 'a.png');
  clock.advance((GRACE + 1) * 1000);

  const { removed, result, waited, collected } = await deleteDuring(deps, user.id, first.row, () => storeImage(deps, user.id, image, 'b.png'));
  t.like(removed, { id: first.row.id }, 'the delete went through');
  t.true(waited, 'the upload waited for the delete');
  t.like(result, { deduped: false, row: { state: 'ready', sha256: image.sha256, filename: 'b.png' } });
  t.not(result.row.id, first.row.id);
  t.false(collected, 'the new media keeps the object');
  t.like(await deps.store.readyOf(user.id, result.row.id), { sha256: image.sha256 });
  t.deepEqual(await objectState(deps, image.sha256), { row: true, bytes: image.data.length });
  t.is(await deps.store.readyOf(user.id, first.row.id), null);
});

test.serial('a completed upload racing the delete of the copy it would merge into becomes ready, with its object', async (t) => {
  const deps = depsFor(join(root, 'delete-race-complete'));
  const user = await createTestUser(runtime.db.knex);
  const bytes = await solidImage('png', 8, 8, 37);
  const image = await sanitize(deps, bytes);
  const first = await storeImage(deps, user.id, image, 'a.png');
  clock.advance((GRACE + 1) * 1000);
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, bytes, 'image/png');

  const { removed, result, waited, collected } = await deleteDuring(deps, user.id, first.row, () => finalizeUpload(deps, id));
  t.like(removed, { id: first.row.id });
  t.true(waited, 'the finalisation waited for the delete');
  t.like(result, { deduped: false, row: { id, state: 'ready', sha256: image.sha256 } });
  t.false(collected, 'the finalised media keeps the object');
  t.like(await deps.store.readyOf(user.id, id), { sha256: image.sha256 });
  t.deepEqual(await objectState(deps, image.sha256), { row: true, bytes: image.data.length });
});

test.serial('a completed upload merged into a copy deleted just after it committed answers that copy, not 404', async (t) => {
  const deps = depsFor(join(root, 'delete-after-merge'));
  const user = await createTestUser(runtime.db.knex);
  const bytes = await solidImage('png', 8, 8, 41);
  const image = await sanitize(deps, bytes);
  const first = await storeImage(deps, user.id, image, 'a.png');
  const id = await completedUpload(deps, runtime.db.knex, clock, user.id, bytes, 'image/png');

  let deleted: MediaRow | null = null;
  deps.checkpoint = async (step) => {
    if (step !== 'committed' || deleted) return;
    deleted = await deps.store.transaction((trx) => deps.store.deleteReady(trx, user.id, first.row.id));
  };
  const result = await finalizeUpload(deps, id);
  t.like(deleted, { id: first.row.id }, 'the copy was deleted between the merge and the answer');
  t.like(result, { deduped: true, row: { id: first.row.id, sha256: image.sha256 } });
  t.like(await deps.store.byId(id), { state: 'merged', merged_into: first.row.id });
});
