import { randomBytes } from 'node:crypto';
import { stat, writeFile, mkdir } from 'node:fs/promises';
import http from 'node:http';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import test from 'ava';
import type { Request, Response } from 'express';
import sharp from 'sharp';
import { ApiError, ManualClock } from '../../services/kit/index.js';
import { createFilesystemStorage, createMediaStore, createUrlSigner, expireReservations, uploadKey, type ObjectStorage } from '../../domains/media/index.js';
import { acceptSignedUpload, type SignedRouteDeps } from '../../services/media-api/files/signed.js';
import { waitFor } from '../helpers/wait.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// Direct uploads to the filesystem driver race with `complete` and with expiry. The signed PUT
// once checked the reservation only before reading its body, so a second PUT started before
// `complete` wrote uploads/<id> after the media was finalised: a file nothing ever collected,
// outside the quota. Now the write happens under the reservation's row lock, re-checked there.
// Serial: the expiry test expires every open reservation of this file's schema.
const SECRET = randomBytes(24).toString('hex');
const MAX_BYTES = 2_000_000;
let p: MediaPlatform;

test.before(async () => {
  p = await startMediaPlatform({ MEDIA_SIGNING_SECRET: SECRET, MEDIA_MAX_BYTES: String(MAX_BYTES), MEDIA_SWEEP_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

const stagingPath = (id: string) => join(p.dataDir, 'media', uploadKey(id));
const exists = (path: string) => stat(path).then(() => true, () => false);

/** A PNG padded to `size` bytes (the decoder ignores what follows the image). */
async function paddedPng(size: number, seed: number) {
  const png = await sharp({ create: { width: 8, height: 8, channels: 3, background: { r: seed, g: 52, b: 86 } } }).png().toBuffer();
  return Buffer.concat([png, Buffer.alloc(size - png.length, 0x41)]);
}

/** The signed-PUT handler as media-api runs it, over a request whose body the test feeds. */
function handlerDeps(storage?: ObjectStorage) {
  const store = createMediaStore(p.runtime.db.knex);
  let checked!: () => void;
  const firstCheck = new Promise<void>((resolve) => (checked = resolve));
  const deps: SignedRouteDeps = {
    storage: storage ?? createFilesystemStorage({ root: join(p.dataDir, 'media'), publicUrl: () => p.url, signer: createUrlSigner(Buffer.from(SECRET)), clock: p.runtime.clock }),
    // The handler's first look at the reservation (before it reads the body) is observable here.
    store: { ...store, byId: async (...args: Parameters<typeof store.byId>) => {
      const row = await store.byId(...args);
      checked();
      return row;
    } },
    clock: p.runtime.clock,
    signer: createUrlSigner(Buffer.from(SECRET)),
    maxBytes: MAX_BYTES,
  };
  return { deps, firstCheck };
}

function startPut(deps: SignedRouteDeps, uploadUrl: string, headers: Record<string, string>) {
  const url = new URL(uploadUrl);
  const body = new PassThrough();
  const req = Object.assign(body, {
    method: 'PUT',
    params: { key: url.pathname.replace(/^\/v1\/media\/signed\//, '') },
    query: Object.fromEntries(url.searchParams),
    headers,
  }) as unknown as Request;
  let status = 0;
  const res = { status(code: number) { status = code; return res; }, set() { return res; }, end() { return res; } } as unknown as Response;
  const done = acceptSignedUpload(deps, req, res).then(() => status, (error) => (error instanceof ApiError ? error.status : Promise.reject(error)));
  return { body, done };
}

test.serial('a PUT still sending when complete finalises the media writes nothing (403), and no staging file is left', async (t) => {
  const user = await p.newUser();
  const N = 1_500_000;
  const bytes = await paddedPng(N, 1);
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: N, filename: 'x.png' });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  const id = reserve.body.id;
  const put1 = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: bytes });
  t.is(put1.status, 200, await put1.text());

  // A second PUT passes the "reservation open" check and sends half its body...
  const { deps, firstCheck } = handlerDeps();
  const put2 = startPut(deps, reserve.body.upload_url, reserve.body.headers);
  await firstCheck;
  put2.body.write(Buffer.alloc(N / 2, 0x42));
  // ...complete finalises the media meanwhile...
  const complete = await postJson(`${p.url}/v1/media/${id}/complete`, user.headers, {});
  t.is(complete.status, 201, JSON.stringify(complete.body));
  t.false(await exists(stagingPath(id)), 'complete removed the staging file');
  // ...and the rest of the body arrives: refused, nothing written.
  put2.body.end(Buffer.alloc(N / 2, 0x42));
  t.is(await put2.done, 403);
  t.false(await exists(stagingPath(id)), 'no staging file written after finalisation');
  const row = await p.runtime.db.knex('media').where({ id }).first();
  t.like(row, { state: 'ready', upload_key: null });

  // Over HTTP (through the edge) too: a PUT after complete is 403 and writes nothing.
  const late = await fetch(reserve.body.upload_url, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: bytes });
  t.is(late.status, 403);
  t.false(await exists(stagingPath(id)));
});

test.serial('a complete that arrives while a PUT is writing waits for the write, and finalises its bytes', async (t) => {
  const user = await p.newUser();
  const N = 300_000;
  const bytes = await paddedPng(N, 2);
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: N });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  const id = reserve.body.id;

  // The write is held at the storage until the test lets it go (the row lock is taken by then).
  const base = createFilesystemStorage({ root: join(p.dataDir, 'media'), publicUrl: () => p.url, signer: createUrlSigner(Buffer.from(SECRET)), clock: p.runtime.clock });
  let writing!: () => void;
  const writeStarted = new Promise<void>((resolve) => (writing = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const held: ObjectStorage = { ...base, put: async (key, body, type) => { writing(); await released; return base.put(key, body, type); } };
  const { deps } = handlerDeps(held);
  const put = startPut(deps, reserve.body.upload_url, reserve.body.headers);
  put.body.end(bytes);
  await writeStarted;

  const complete = postJson(`${p.url}/v1/media/${id}/complete`, user.headers, {});
  // complete's pending → completing update waits for the reservation's row lock.
  await waitFor(async () => {
    const { rows } = await p.runtime.db.knex.raw(
      "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike 'update \"media\" set \"state\"%'",
    );
    return rows[0].n > 0;
  }, 10_000, 'complete waiting for the row lock');
  release();
  t.is(await put.done, 200);
  const done = await complete;
  t.is(done.status, 201, JSON.stringify(done.body));
  t.like(done.body, { id, width: 8, height: 8 });
  t.false(await exists(stagingPath(id)));
});

test.serial('expiry: a staging file written by a PUT that held the lock just before expiry is removed with the row', async (t) => {
  const user = await p.newUser();
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: 1000 });
  t.is(reserve.status, 201, JSON.stringify(reserve.body));
  const id = reserve.body.id;
  const path = stagingPath(id);
  const storage = createFilesystemStorage({ root: join(p.dataDir, 'media'), publicUrl: () => p.url, signer: createUrlSigner(Buffer.from(SECRET)), clock: p.runtime.clock });
  const later = new ManualClock(Date.now() + 2 * 86400_000);
  const expired = await expireReservations({
    store: createMediaStore(p.runtime.db.knex),
    storage,
    clock: later,
    // Between the staging delete and the row delete, the racing PUT's write lands.
    checkpoint: async (step) => {
      if (step !== 'staging-expired') return;
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, 'late bytes');
    },
  });
  t.true(expired >= 1);
  t.is(await p.runtime.db.knex('media').where({ id }).first(), undefined, 'the reservation is gone');
  t.false(await exists(path), 'and so is its staging file');
});

test.serial('the HTTP route: PUT after the reservation expired or was completed is 403 before the body is read', async (t) => {
  const user = await p.newUser();
  const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: 1000 });
  const id = reserve.body.id;
  await p.runtime.db.knex('media').where({ id }).update({ state: 'ready', upload_key: null });
  const url = new URL(reserve.body.upload_url);
  const status = await new Promise<number>((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'PUT', headers: reserve.body.headers });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end(Buffer.alloc(1000));
  });
  t.is(status, 403);
  t.false(await exists(stagingPath(id)));
});
