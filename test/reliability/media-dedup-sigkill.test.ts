import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp from 'amqplib';
import test from 'ava';
import S3rver from 's3rver';
import { MEDIA_DEDUP_QUEUE, createS3Storage, objectKey } from '../../domains/media/index.js';
import { ManualClock } from '../../services/kit/index.js';
import { mediaApiService } from '../../services/media-api/service.js';
import { queueConsumers } from '../helpers/amqp.js';
import { startTestService } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startEntryPoint, stackEnv, type Child } from '../helpers/process.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { createTestUser, edgeHeaders } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';
import { solidImage } from '../media/fixtures.js';

// The media-dedup worker runs in its own process and is SIGKILLed while it collects the object of
// a deleted media (its S3 delete is held by a stalled proxy; the event is unacked). A second worker
// process gets the event again and finishes the job: the object row and the stored bytes are gone,
// exactly once, and nothing else was touched.
const BUCKET = 'dedup-kill';
const S3 = { S3_BUCKET: BUCKET, S3_REGION: 'us-east-1', S3_ACCESS_KEY_ID: 'S3RVER', S3_SECRET_ACCESS_KEY: 'S3RVER', S3_FORCE_PATH_STYLE: 'true' };
const figures = reliabilityFigures('media-dedup-sigkill');
const row = figures.row('media-dedup worker SIGKILLed mid-job');
test.after.always(() => figures.write());

test('a media-dedup worker SIGKILLed mid-collection: the next worker redoes it, the object is gone once', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 's3rver-dedup-'));
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, configureBuckets: [{ name: BUCKET }] });
  const { port: s3Port } = await server.run();
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: s3Port });
  const env = { ...S3, S3_ENDPOINT: proxy.url('http'), MEDIA_GC_GRACE_SECONDS: '0', MEDIA_SWEEP_INTERVAL_MS: '0' };
  const svc = await startTestService(mediaApiService, { env });
  const config = svc.runtime.config;
  const broker = await amqp.connect(config.AMQP_URL!);
  const children: Child[] = [];
  const direct = createS3Storage({ endpoint: `http://127.0.0.1:${s3Port}`, bucket: BUCKET, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', forcePathStyle: true, clock: new ManualClock() });
  t.teardown(async () => {
    for (const c of children) c.process.kill('SIGKILL');
    await broker.close().catch(() => {});
    await direct.close();
    await svc.close();
    await proxy.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  const user = await createTestUser(svc.runtime.db.knex);
  const headers = { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json' };
  const png = await solidImage('png', 6, 6, 21);
  const uploaded = await fetch(`${svc.url}/v1/media/upload`, { method: 'POST', headers, body: JSON.stringify({ source: { type: 'base64', data: png.toString('base64') } }) });
  t.is(uploaded.status, 201);
  const media = (await uploaded.json()) as { id: string };
  const { sha256 } = await svc.runtime.db.knex('media').where({ id: media.id }).first();
  t.true(await direct.exists(objectKey(sha256)));

  const worker = () => {
    const child = startEntryPoint('workers/media-dedup/main.ts', stackEnv(config, env));
    children.push(child);
    return child;
  };
  const queue = `${config.BUS_QUEUE_PREFIX}${MEDIA_DEDUP_QUEUE}`;
  const consumers = () => queueConsumers(broker, queue);

  const first = worker();
  await waitFor(async () => (await consumers()) === 1, 60_000, 'first worker consuming');
  proxy.stall();
  const before = proxy.connections();
  const deleted = await fetch(`${svc.url}/v1/media/${media.id}`, { method: 'DELETE', headers });
  t.true(deleted.status < 300);
  // The worker's S3 delete is on its way (a new connection through the stalled proxy).
  await waitFor(() => proxy.connections() > before, 30_000, 'the worker is collecting the object');
  first.process.kill('SIGKILL');
  row.faultsInjected++;
  await first.exited;
  t.truthy(await svc.runtime.db.knex('media_objects').where({ sha256 }).first(), 'the killed job left the object row');
  proxy.resume();

  worker();
  await waitFor(async () => !(await svc.runtime.db.knex('media_objects').where({ sha256 }).first()), 60_000, 'object collected by the second worker');
  t.false(await direct.exists(objectKey(sha256)));
  row.eventsChecked += 1;
  row.faultsSurvived++;
});
