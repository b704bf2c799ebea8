import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ConfigError, loadConfig, type BusMessage, type Delivery, type EventMessage } from '../../services/kit/index.js';
import {
  MAX_GC_GRACE_SECONDS,
  MEDIA_DEDUP_BINDINGS,
  MEDIA_DEDUP_QUEUE,
  MEDIA_DELETED,
  createDecodeSlots,
  createFilesystemStorage,
  createMediaStore,
  createUrlSigner,
  mediaConfigShape,
  mediaMigrations,
} from '../../domains/media/index.js';
import { createMediaDedup } from '../../workers/media-dedup/index.js';
import { queueDepth } from '../helpers/amqp.js';
import { openTestRuntime } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';

// MEDIA_GC_GRACE_SECONDS is a bus delay too: the worker sends an event for an object still within
// its grace period back onto the queue after grace + 1 s, a delay queue's message TTL on RabbitMQ.
// It is bounded to 2^32-1 ms, what every broker version can hold; a larger grace is refused at
// start, naming the setting.

test('MEDIA_GC_GRACE_SECONDS above what RabbitMQ can delay is refused at config load, naming the setting', (t) => {
  t.is(MAX_GC_GRACE_SECONDS, 4294966);
  t.is(loadConfig(mediaConfigShape, { MEDIA_GC_GRACE_SECONDS: String(MAX_GC_GRACE_SECONDS) }).MEDIA_GC_GRACE_SECONDS, MAX_GC_GRACE_SECONDS);
  t.is(loadConfig(mediaConfigShape, {}).MEDIA_GC_GRACE_SECONDS, 300);
  for (const value of [String(MAX_GC_GRACE_SECONDS + 1), '5000000', '1e12']) {
    const error = t.throws(() => loadConfig(mediaConfigShape, { MEDIA_GC_GRACE_SECONDS: value }), { instanceOf: ConfigError });
    t.regex(error!.message, /MEDIA_GC_GRACE_SECONDS/);
    t.regex(error!.message, /at most 4294966 seconds/);
  }
});

test('RabbitMQ: at the longest grace accepted, the worker parks an object within its grace on the delay queue (nothing fails or dead-letters)', async (t) => {
  const runtime = await openTestRuntime({ migrations: [mediaMigrations], bus: 'amqp' });
  const root = await mkdtemp(join(tmpdir(), 'media-grace-'));
  try {
    const store = createMediaStore(runtime.db.knex);
    const dedup = createMediaDedup({
      store,
      storage: createFilesystemStorage({ root, publicUrl: () => 'http://media.test', signer: createUrlSigner(randomBytes(32)), clock: runtime.clock }),
      clock: runtime.clock,
      limits: { maxBytes: 1_000_000, maxPixels: 1_000_000, allowedTypes: ['image/png'], jpegQuality: 90 },
      quotaBytes: 0,
      withSlot: createDecodeSlots(1),
      graceSeconds: MAX_GC_GRACE_SECONDS,
      logger: runtime.logger,
    });
    // An object no media references, touched just now (a media deleted right after its upload).
    const sha256 = randomBytes(32).toString('hex');
    await store.touchObject(sha256, 10, 'image/png', new Date(runtime.clock.now()));

    const failures: unknown[] = [];
    let settled = 0;
    const consumer = await runtime.bus.consume({ queue: MEDIA_DEDUP_QUEUE, bindings: MEDIA_DEDUP_BINDINGS }, async (message, delivery: Delivery) => {
      try {
        await dedup.handle(message as BusMessage<EventMessage>, delivery);
        settled++;
      } catch (error) {
        failures.push(error);
        throw error;
      }
    });
    try {
      await runtime.bus.publish(MEDIA_DELETED, { id: 'evt_grace', type: MEDIA_DELETED, data: { media_id: 'jan_x', sha256 } }, { messageId: 'evt_grace' });
      const prefix = runtime.config.BUS_QUEUE_PREFIX;
      const delayQueue = `${prefix}${MEDIA_DEDUP_QUEUE}.delay.${MAX_GC_GRACE_SECONDS * 1000 + 1000}`;
      await waitFor(async () => settled === 1 && (await queueDepth(delayQueue)) === 1, 30_000, 'the event parked on the delay queue');
      t.deepEqual(failures, []);
      t.is(await queueDepth(`${prefix}${MEDIA_DEDUP_QUEUE}.dead`), 0);
      t.true(await store.objectExists(sha256), 'the object within its grace is kept');
    } finally {
      await consumer.cancel();
    }
  } finally {
    await runtime.dispose();
    await rm(root, { recursive: true, force: true });
  }
});

test('RabbitMQ refuses the delay of a grace the settings used to accept (1e9 s): the worker could never park that event', async (t) => {
  // Current brokers refuse a message TTL above ten years (older ones took it, and their queue
  // process crashed on a timer over 2^32-1 ms): the retry of such an event would fail every time.
  const runtime = await openTestRuntime({ bus: 'amqp' });
  try {
    await t.throwsAsync(runtime.bus.send('grace-probe', { probe: true }, { messageId: 'probe', delayMs: 1e9 * 1000 + 1000 }));
  } finally {
    await runtime.dispose();
  }
});
