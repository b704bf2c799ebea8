import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { createDecodeSlots, createFilesystemStorage, createMediaStore, createUrlSigner, mediaMigrations, objectKey, sweep, type IngestDeps } from '../../domains/media/index.js';
import { ManualClock } from '../../services/kit/clock.js';
import { mediaApiService } from '../../services/media-api/service.js';
import { openTestRuntime, startTestService } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';

// The filesystem driver writes each object to `<final path>.<random>.tmp` and renames it. A process
// killed between the two leaves the temp file behind; those older than an hour (by mtime) are
// removed at start-up and by the sweep. A fresh one (a write that may be in progress, here or in
// another process) and every real object stay.
const HOUR = 3_600_000;
const SHA = 'ab'.repeat(32);

async function leftovers(root: string) {
  const dir = join(root, 'objects', 'ab');
  await mkdir(dir, { recursive: true });
  await mkdir(join(root, 'uploads'), { recursive: true });
  const stale = join(dir, `${SHA}.0123456789ab.tmp`);
  const staleUpload = join(root, 'uploads', 'jan_01jd0000000000000000000000.aaaaaaaaaaaa.tmp');
  const fresh = join(dir, `${SHA}.ba9876543210.tmp`);
  const object = join(dir, SHA);
  for (const path of [stale, staleUpload, fresh, object]) await writeFile(path, 'half-written');
  const old = new Date(Date.now() - 2 * HOUR);
  for (const path of [stale, staleUpload, object]) await utimes(path, old, old);
  return { stale, staleUpload, fresh, object };
}

const present = async (root: string) => [...(await readdir(join(root, 'objects', 'ab'))), ...(await readdir(join(root, 'uploads')))].sort();

test('the driver removes temp files older than an hour, never a fresh one or an object', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'media-temps-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  await leftovers(root);
  const storage = createFilesystemStorage({ root, publicUrl: () => 'http://127.0.0.1', signer: createUrlSigner(Buffer.from('secret')), clock: new ManualClock() });
  t.is(await storage.removeStaleTemporaries!(), 2);
  t.deepEqual(await present(root), [SHA, `${SHA}.ba9876543210.tmp`]);
  t.true(await storage.exists(objectKey(SHA)));
  // Writes still work, and leave no temp file of their own.
  await storage.put(objectKey('cd'.repeat(32)), Buffer.from('bytes'), 'image/png');
  t.deepEqual(await readdir(join(root, 'objects', 'cd')), ['cd'.repeat(32)]);
});

test('media-api removes stale temp files of DATA_DIR/media when it starts', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-temps-start-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const root = join(dataDir, 'media');
  const files = await leftovers(root);
  const svc = await startTestService(mediaApiService, { env: { DATA_DIR: dataDir } });
  t.teardown(() => svc.close());
  await waitFor(async () => (await present(root)).length === 2, 10_000, 'the stale temp files removed at start-up');
  t.deepEqual(await present(root), [SHA, `${SHA}.ba9876543210.tmp`]);
  t.truthy(files.fresh);
});

test('the media sweep removes stale temp files too', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'media-temps-sweep-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  await leftovers(root);
  const runtime = await openTestRuntime({ migrations: [mediaMigrations], bus: 'pg' });
  t.teardown(() => runtime.dispose());
  const clock = new ManualClock();
  const deps = {
    store: createMediaStore(runtime.db.knex),
    storage: createFilesystemStorage({ root, publicUrl: () => 'http://127.0.0.1', signer: createUrlSigner(Buffer.from('secret')), clock }),
    clock,
    quotaBytes: 0,
    withSlot: createDecodeSlots(1),
  } as unknown as IngestDeps; // nothing to finalise: the sanitising limits are never read
  t.like(await sweep(deps, 0), { temporaries: 2, failed: 0 });
  t.deepEqual(await present(root), [SHA, `${SHA}.ba9876543210.tmp`]);
});
