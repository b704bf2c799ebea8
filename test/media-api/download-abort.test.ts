import { readdir, readlink } from 'node:fs/promises';
import test from 'ava';
import { noisePng } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';
import { waitFor } from '../helpers/wait.js';

// A download the client abandons half-way must release the stored object's stream. The routes
// piped it with `.pipe()`, which only unpipes when the response closes early: the file stream
// stayed open, paused, for good (one file descriptor leaked per abandoned download; with S3, one
// pooled connection held). Both download routes are checked: `/v1/media/{id}/content` and the
// filesystem driver's signed URL.
let p: MediaPlatform;
const MAX_BYTES = 20 * 1024 * 1024;

test.before(async () => {
  p = await startMediaPlatform({ MEDIA_MAX_BYTES: String(MAX_BYTES), MEDIA_QUOTA_BYTES_PER_USER: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

/** Descriptors of this process open on files under the platform's DATA_DIR (the platform runs in process). */
async function openStoredFiles(): Promise<string[]> {
  const open: string[] = [];
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.startsWith(p.dataDir)) open.push(target);
  }
  return open;
}

/** Starts a download, reads its first chunk, then goes away. */
async function abandon(url: string, headers: Record<string, string> = {}) {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  if (res.status !== 200) throw new Error(`download answered ${res.status}: ${await res.text()}`);
  const first = await res.body!.getReader().read();
  controller.abort();
  return first.value?.length ?? 0;
}

test('abandoned downloads (content route and signed URL) release the stored file', async (t) => {
  const user = await p.newUser();
  // Several MB of incompressible pixels: far more than the socket buffers hold, so the server is
  // still streaming when the client leaves.
  const big = await noisePng(1500, 1500);
  const up = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: big.toString('base64') } });
  t.is(up.status, 201, JSON.stringify(up.body).slice(0, 300));
  t.true(up.body.bytes > 4 * 1024 * 1024);

  const link = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { media_id: up.body.id });
  t.is(link.status, 200);
  for (let i = 0; i < 3; i++) {
    t.true((await abandon(`${p.url}/v1/media/${up.body.id}/content`, user.headers)) > 0);
    t.true((await abandon(link.body.url)) > 0);
  }
  await t.notThrowsAsync(
    waitFor(async () => (await openStoredFiles()).length === 0, 10_000, 'every stored file closed after the clients left'),
  );
  t.deepEqual(await openStoredFiles(), []);

  // A complete download still works, and leaves nothing open either.
  const whole = await fetch(`${p.url}/v1/media/${up.body.id}/content`, { headers: user.headers });
  t.is(Buffer.from(await whole.arrayBuffer()).length, up.body.bytes);
  await t.notThrowsAsync(waitFor(async () => (await openStoredFiles()).length === 0, 10_000, 'stored file closed after a full download'));
});
