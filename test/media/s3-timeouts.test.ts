import net from 'node:net';
import test from 'ava';
import { isDependencyUnavailable, ManualClock } from '../../services/kit/index.js';
import { createS3Storage, objectKey } from '../../domains/media/index.js';
import { solidImage } from './fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from './harness.js';

// An S3 endpoint that accepts connections and never answers (a black hole on loopback). Without
// timeouts the SDK waited forever and uploads hung; with S3_REQUEST_TIMEOUT_MS every storage call
// fails (after the SDK's retries), and media-api answers 503 `service_unavailable`.
let hole: net.Server;
let endpoint: string;
const sockets = new Set<net.Socket>();
let accepted = 0;

test.before(async () => {
  hole = net.createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    // Reads whatever comes, never writes a byte.
    socket.resume();
  });
  await new Promise<void>((resolve) => hole.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(hole.address() as net.AddressInfo).port}`;
});
test.after.always(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => hole?.close(() => resolve()));
});

test('the driver: every call against a black hole fails as a dependency outage', async (t) => {
  const storage = createS3Storage({
    endpoint,
    bucket: 'hole',
    region: 'us-east-1',
    accessKeyId: 'K',
    secretAccessKey: 'S',
    forcePathStyle: true,
    clock: new ManualClock(),
    connectTimeoutMs: 200,
    requestTimeoutMs: 200,
  });
  try {
    const key = objectKey('ab'.repeat(32));
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['put', () => storage.put(key, Buffer.from('x'), 'image/png')],
      ['read', () => storage.read(key, 100)],
      ['open', () => storage.open(key)],
      ['exists', () => storage.exists(key)],
      ['delete', () => storage.delete(key)],
    ];
    for (const [name, call] of calls) {
      const error = await t.throwsAsync(call(), undefined, name);
      t.true(isDependencyUnavailable(error), `${name}: ${(error as Error)?.name} ${(error as Error)?.message}`);
    }
    t.true(accepted > 0, 'the calls did reach the black hole');
  } finally {
    await storage.close();
  }
});

test('media-api on a black-holed S3: uploads answer 503 service_unavailable in the error body', async (t) => {
  let p: MediaPlatform | undefined;
  try {
    p = await startMediaPlatform({
      S3_ENDPOINT: endpoint,
      S3_BUCKET: 'hole',
      S3_REGION: 'us-east-1',
      S3_ACCESS_KEY_ID: 'K',
      S3_SECRET_ACCESS_KEY: 'S',
      S3_FORCE_PATH_STYLE: 'true',
      S3_CONNECT_TIMEOUT_MS: '200',
      S3_REQUEST_TIMEOUT_MS: '200',
    });
    const user = await p.newUser();
    const png = await solidImage('png', 5, 5, 1);
    const res = await postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } });
    t.is(res.status, 503, JSON.stringify(res.body));
    t.like(res.body, { error: { type: 'internal_error', code: 'service_unavailable' } });
    t.truthy(res.body.error.request_id);
    const [row] = await p.runtime.db.knex('media').where({ user_id: user.userId }).count({ n: '*' });
    t.is(Number(row!.n), 0, 'no media record for the failed upload');

    // A direct upload's complete reads the staging object: the same 503.
    const reserve = await postJson(`${p.url}/v1/media/presigned-url`, user.headers, { mime_type: 'image/png', bytes: png.length });
    t.is(reserve.status, 201, JSON.stringify(reserve.body));
    const complete = await postJson(`${p.url}/v1/media/${reserve.body.id}/complete`, user.headers, {});
    t.is(complete.status, 503, JSON.stringify(complete.body));
    t.like(complete.body, { error: { code: 'service_unavailable' } });
  } finally {
    await p?.stop();
  }
});
