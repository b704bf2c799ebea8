import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ApiError, createEgressGuard } from '../../services/kit/index.js';
import { completeUpload, type MediaDeps } from '../../services/media-api/media/media.js';
import { createDecodeSlots, createFilesystemStorage, createMediaStore, createUrlSigner, finalizeUpload, mediaMigrations, sanitize } from '../../domains/media/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { createTestUser } from '../helpers/users.js';
import { completedUpload } from './completed-upload.js';
import { solidImage } from './fixtures.js';

// Each upload waiting for a decode slot holds its bytes: a request waits behind at most
// MEDIA_PROCESSING_QUEUE others, then is a 503 to retry; the worker's completions wait their turn.
const limits = { maxBytes: 10 * 1024 * 1024, maxPixels: 10_000_000, allowedTypes: ['image/png', 'image/jpeg', 'image/webp', 'image/gif'], jpegQuality: 90 };

test('past MEDIA_PROCESSING_QUEUE waiting uploads a request is a 503 with Retry-After; the worker still waits; the waiting ones finish', async (t) => {
  const withSlot = createDecodeSlots(1);
  const deps = { limits, withSlot, maxDecodeWaiting: 1 };
  const png = await solidImage('png');

  let release!: () => void;
  const holding = withSlot(() => new Promise<void>((resolve) => (release = resolve)));
  const waiting = sanitize(deps, png, true); // the one place in the queue
  const worker = sanitize(deps, png); // a completion the worker finishes: not bounded

  const refused = await t.throwsAsync(sanitize(deps, png, true));
  t.true(refused instanceof ApiError);
  t.is((refused as ApiError).status, 503);
  t.is((refused as ApiError).code, 'service_unavailable');
  t.is((refused as ApiError).headers['retry-after'], '1');

  release();
  await holding;
  t.is((await waiting).mimeType, 'image/png');
  t.is((await worker).mimeType, 'image/png');
  // The queue drained: a request is decoded again.
  t.is((await sanitize(deps, png, true)).mimeType, 'image/png');
});

test('MEDIA_PROCESSING_QUEUE 0: a request never waits, it is decoded when a slot is free and refused when none is', async (t) => {
  const withSlot = createDecodeSlots(1);
  const deps = { limits, withSlot, maxDecodeWaiting: 0 };
  const png = await solidImage('png');
  t.is((await sanitize(deps, png, true)).width, 32);
  let release!: () => void;
  const holding = withSlot(() => new Promise<void>((resolve) => (release = resolve)));
  await t.throwsAsync(sanitize(deps, png, true), { instanceOf: ApiError, message: /retry in a moment/ });
  release();
  await holding;
});

test("a client's complete of a direct upload is bounded alike (503, the upload stays to finish); the worker's finalisation waits its turn", async (t) => {
  const runtime = await openTestRuntime({ migrations: [mediaMigrations] });
  const root = await mkdtemp(join(tmpdir(), 'media-decode-queue-'));
  t.teardown(async () => {
    await runtime.dispose();
    await rm(root, { recursive: true, force: true });
  });
  const withSlot = createDecodeSlots(1);
  const deps = {
    store: createMediaStore(runtime.db.knex),
    storage: createFilesystemStorage({ root, publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock: runtime.clock }),
    clock: runtime.clock,
    limits,
    quotaBytes: 100 * 1024 * 1024,
    withSlot,
    maxDecodeWaiting: 0,
  };
  const user = await createTestUser(runtime.db.knex);
  const id = await completedUpload(deps, runtime.db.knex, runtime.clock, user.id, await solidImage('png'), 'image/png');

  let release!: () => void;
  const holding = withSlot(() => new Promise<void>((resolve) => (release = resolve)));
  // The client's complete, as the route calls it.
  const media = { ...deps, guard: createEgressGuard(), sources: {} as MediaDeps['sources'], urlTtlSeconds: 60, urlMaxTtlSeconds: 3600, uploadTtlSeconds: 900 };
  await t.throwsAsync(completeUpload(media, user.id, id), { instanceOf: ApiError, message: /retry in a moment/ });
  t.is((await deps.store.byId(id))!.state, 'completing');
  const worker = finalizeUpload(deps, id);
  release();
  await holding;
  const stored = await worker;
  t.is(stored!.row.state, 'ready');
});
