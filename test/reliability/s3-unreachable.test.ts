import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import S3rver from 's3rver';
import { ManualClock } from '../../services/kit/index.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { waitFor } from '../helpers/wait.js';
import { solidImage } from '../media/fixtures.js';
import { postJson, startMediaPlatform, type MediaPlatform } from '../media/harness.js';

// media-api on the S3 driver, with the S3-protocol server (s3rver) behind a fault proxy. While it
// is unreachable, uploads are answered 503 `service_unavailable` in the error body and leave no
// media record. An upload marks its content-addressed object row before writing the bytes (so the
// collector spares it); the rows of the failed writes are unreferenced and the media-dedup
// worker's sweep collects them once the grace period has passed (the clock is moved past it), so
// nothing is left behind. When the store is back, uploads succeed again without a restart.
const BUCKET = 'media-outage';
const figures = reliabilityFigures('s3-unreachable');
const row = figures.row('object storage (S3) unreachable');

let server: S3rver;
let dir: string;
let proxy: FaultProxy;
let p: MediaPlatform;
const clock = new ManualClock();
const GRACE_SECONDS = 300;

test.before(async () => {
  dir = await mkdtemp(join(tmpdir(), 's3rver-outage-'));
  server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, configureBuckets: [{ name: BUCKET }] });
  const address = await server.run();
  proxy = await startFaultProxy({ host: '127.0.0.1', port: address.port });
  p = await startMediaPlatform({
    S3_ENDPOINT: proxy.url('http'),
    S3_BUCKET: BUCKET,
    S3_REGION: 'us-east-1',
    S3_ACCESS_KEY_ID: 'S3RVER',
    S3_SECRET_ACCESS_KEY: 'S3RVER',
    S3_FORCE_PATH_STYLE: 'true',
    MEDIA_GC_GRACE_SECONDS: String(GRACE_SECONDS),
    MEDIA_SWEEP_INTERVAL_MS: '100',
  }, { clock });
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  await proxy?.close();
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

const records = async () => {
  const [media] = await p.runtime.db.knex('media').count({ n: '*' });
  const [objects] = await p.runtime.db.knex('media_objects').count({ n: '*' });
  return { media: Number(media!.n), objects: Number(objects!.n) };
};

test('S3 unreachable: uploads 503 with no orphan records, and succeed again when it is back', async (t) => {
  const user = await p.newUser();
  const upload = (seed: number) => solidImage('png', 9, 7, seed).then((png) => postJson(`${p.url}/v1/media/upload`, user.headers, { source: { type: 'base64', data: png.toString('base64') } }));
  const statuses: number[] = [];

  const before = await upload(1);
  statuses.push(before.status);
  t.is(before.status, 201, JSON.stringify(before.body));
  const atCut = await records();

  proxy.cut();
  row.faultsInjected++;
  for (let seed = 2; seed < 6; seed++) {
    const reply = await upload(seed);
    statuses.push(reply.status);
    t.is(reply.status, 503, JSON.stringify(reply.body));
    t.like(reply.body, { error: { type: 'internal_error', code: 'service_unavailable' } });
  }
  const duringOutage = await records();
  t.is(duringOutage.media, atCut.media, 'no media row left by a failed upload');

  proxy.resume();
  clock.advance((GRACE_SECONDS + 1) * 1000);
  await waitFor(async () => (await records()).objects === atCut.objects, 30_000, 'unreferenced object rows of the failed uploads collected');
  const fresh = await p.newUser();
  const after = await waitFor(async () => {
    const png = await solidImage('png', 9, 7, 10);
    const reply = await postJson(`${p.url}/v1/media/upload`, fresh.headers, { source: { type: 'base64', data: png.toString('base64') } });
    statuses.push(reply.status);
    return reply.status === 201 ? reply : undefined;
  }, 30_000, 'uploads succeed again');
  t.is(after.body.object, 'media');
  t.deepEqual(await records(), { media: atCut.media + 1, objects: atCut.objects + 1 });

  row.requestsChecked += statuses.length;
  row.refused503 += statuses.filter((s) => s === 503).length;
  row.fiveXx += statuses.filter((s) => s >= 500 && s !== 503).length;
  row.itemsLost += duringOutage.media - atCut.media;
  t.deepEqual(statuses.filter((s) => s !== 201 && s !== 503), []);
  row.faultsSurvived++;
});
