import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, loadBaseConfig, newId, recordEvent } from '../../services/kit/index.js';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { startPlatform } from '../../services/platform/platform.js';
import { startReceiver } from './helpers.js';

// The embedded defaults of `npm start` (PGlite + the PostgreSQL-backed queue, no DATABASE_URL or
// AMQP_URL): the worker registered in services/platform/registry.ts delivers a signed event.
test('on the embedded defaults the platform delivers events to a subscription', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'webhooks-embedded-'));
  const receiver = await startReceiver();
  const secret = 'x'.repeat(40);
  const config = loadBaseConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    GATEWAY_SHARED_SECRET: secret,
    GATEWAY_PORT: '0',
    LLM_API_PORT: '0',
    RESPONSE_API_PORT: '0',
    MEDIA_API_PORT: '0',
    MCP_TOOLS_PORT: '0',
    BUS_POLL_MS: '20',
    OUTBOX_POLL_MS: '20',
    EGRESS_ALLOW_HOSTS: '127.0.0.1',
  });
  const platform = await startPlatform(config);
  t.teardown(async () => {
    await platform.stop();
    await receiver.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  t.is(platform.ctx.runtime.bus.driver, 'pg');
  const knex = platform.ctx.runtime.db.knex;
  const adminId = newId('user');
  await knex('users').insert({ id: adminId, subject: adminId, email: 'admin@example.test', username: 'admin', is_admin: true });
  const res = await fetch(`http://127.0.0.1:${platform.port('llm-api')}/v1/admin/webhooks`, {
    method: 'POST',
    headers: { [GATEWAY_TOKEN_HEADER]: secret, [IDENTITY_HEADERS.authMethod]: 'jwt', [IDENTITY_HEADERS.userId]: adminId, 'content-type': 'application/json' },
    body: JSON.stringify({ url: receiver.url('/embedded'), events: ['model.*'] }),
  });
  t.is(res.status, 201);
  const webhook = (await res.json()) as { id: string; secret: string };

  const eventId = await knex.transaction((trx) => recordEvent(trx, 'model.added', { model_id: 'vendor/model', provider: 'p', capabilities: [], added_at: new Date().toISOString() }));
  platform.ctx.runtime.relay.kick();
  const [got] = await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === eventId), 30_000, 'embedded delivery');
  t.is(got!.headers['x-webhook-id'], webhook.id);
  t.true(verifyWebhookSignature({ body: got!.body, signature: String(got!.headers['x-signature']), timestamp: String(got!.headers['x-timestamp']), secret: webhook.secret }).ok);
});
