import test from 'ava';
import { MEDIA_DEDUP_BINDINGS, MEDIA_DEDUP_QUEUE, MEDIA_DELETED } from '../../domains/media/index.js';
import { mediaApiService } from '../../services/media-api/service.js';
import { startTestService } from '../helpers/env.js';
import { inbox } from '../helpers/inbox.js';

// Events media-api records before the dedup worker ever started (deployed later, or its first
// start failed) are kept for it: media-api declares the worker's queue and bindings when it
// starts, so the relay never publishes them into an exchange nothing is bound to.
for (const bus of ['pg', 'amqp'] as const) {
  test(`${bus}: a media event published before the dedup worker's first start waits on its queue`, async (t) => {
    const svc = await startTestService(mediaApiService, { bus });
    try {
      // What the outbox relay does with a committed `media.deleted`, while no worker has consumed.
      await svc.runtime.bus.publish(MEDIA_DELETED, { media_id: 'jan_first_start', sha256: 'ab'.repeat(32) }, { messageId: `evt_${bus}` });
      const box = inbox<{ media_id: string }>((r) => r.delivery.ack());
      const consumer = await svc.runtime.bus.consume({ queue: MEDIA_DEDUP_QUEUE, bindings: MEDIA_DEDUP_BINDINGS }, box.handler);
      try {
        const received = await box.next();
        t.is(received.message.id, `evt_${bus}`);
      } finally {
        await consumer.cancel();
      }
    } finally {
      await svc.close();
    }
  });
}
