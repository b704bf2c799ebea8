import test from 'ava';
import { recordEvent } from '../../services/kit/index.js';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { startEmbeddedPlatform } from '../helpers/embedded.js';
import { startReceiver } from './helpers.js';

// The embedded defaults of `npm start` (PGlite + the PostgreSQL-backed queue, no DATABASE_URL or
// AMQP_URL): the worker registered in services/platform/registry.ts delivers a signed event.
test('on the embedded defaults the platform delivers events to a subscription', async (t) => {
  const receiver = await startReceiver();
  const embedded = await startEmbeddedPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1' });
  t.teardown(async () => {
    await embedded.stop();
    await receiver.close();
  });
  const { platform } = embedded;
  t.is(platform.ctx.runtime.bus.driver, 'pg');
  const knex = platform.ctx.runtime.db.knex;
  const res = await embedded.adminCall('POST', '/v1/admin/webhooks', { url: receiver.url('/embedded'), events: ['model.*'] });
  t.is(res.status, 201);
  const webhook = (await res.json()) as { id: string; secret: string };

  const eventId = await knex.transaction((trx) => recordEvent(trx, 'model.added', { model_id: 'vendor/model', provider: 'p', capabilities: [], added_at: new Date().toISOString() }));
  platform.ctx.runtime.relay.kick();
  const [got] = await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === eventId), 30_000, 'embedded delivery');
  t.is(got!.headers['x-webhook-id'], webhook.id);
  t.true(verifyWebhookSignature({ body: got!.body, signature: String(got!.headers['x-signature']), timestamp: String(got!.headers['x-timestamp']), secret: webhook.secret }).ok);
});
