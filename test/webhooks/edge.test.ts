import test from 'ava';
import { randomBase62 } from '../../services/kit/index.js';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { startReceiver, type Receiver } from './helpers.js';

// End to end through the EDGE (embedded gateway + deck/kong.yaml), the whole platform on real
// PostgreSQL and RabbitMQ: the operator's bootstrap key registers a webhook, a guest creates and
// deletes a conversation, the receiver gets both events signed.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let receiver: Receiver;

test.before(async () => {
  receiver = await startReceiver();
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EGRESS_ALLOW_HOSTS: '127.0.0.1' } });
});
test.after.always(async () => {
  await p?.stop();
  await receiver?.close();
});

test('a webhook registered through the edge receives conversation.created and conversation.deleted', async (t) => {
  const adminHeaders = { 'X-API-Key': ADMIN_KEY, 'content-type': 'application/json' };
  const created = await fetch(`${p.url}/v1/admin/webhooks`, {
    method: 'POST',
    headers: adminHeaders,
    body: JSON.stringify({ url: receiver.url('/edge'), events: ['conversation.*'] }),
  });
  t.is(created.status, 201);
  const webhook = (await created.json()) as { id: string; secret: string };

  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const token = ((await login.json()) as { access_token: string }).access_token;
  const guest = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  // A guest is not an administrator.
  t.is((await fetch(`${p.url}/llm/v1/admin/webhooks`, { headers: guest })).status, 403);

  const conv = (await (await fetch(`${p.url}/v1/conversations`, { method: 'POST', headers: guest, body: JSON.stringify({ title: 'Edge' }) })).json()) as { id: string };
  t.regex(conv.id, /^conv_/);
  t.is((await fetch(`${p.url}/v1/conversations/${conv.id}`, { method: 'DELETE', headers: guest })).status, 200);

  const all = await receiver.until((rs) => ['conversation.created', 'conversation.deleted'].every((type) => rs.some((r) => r.headers['x-event-type'] === type && r.json?.data?.conversation_id === conv.id)), 30_000, 'both events');
  const mine = all.filter((r) => r.json?.data?.conversation_id === conv.id);
  for (const r of mine) {
    t.is(r.headers['x-webhook-id'], webhook.id);
    t.true(verifyWebhookSignature({ body: r.body, signature: String(r.headers['x-signature']), timestamp: String(r.headers['x-timestamp']), secret: webhook.secret }).ok);
  }
  const created_ = mine.find((r) => r.headers['x-event-type'] === 'conversation.created')!;
  t.like(created_.json.data, { conversation_id: conv.id, title: 'Edge' });
  const deleted = mine.find((r) => r.headers['x-event-type'] === 'conversation.deleted')!;
  t.is(typeof deleted.json.data.message_count, 'number');

  // The admin sees the deliveries through the edge.
  const list = (await (await fetch(`${p.url}/llm/v1/admin/webhooks/${webhook.id}/deliveries`, { headers: adminHeaders })).json()) as { data: { status: string }[] };
  t.true(list.data.length >= 2);
});

test('through the edge, the admin test endpoint makes a signed webhook.test event arrive', async (t) => {
  const adminHeaders = { 'X-API-Key': ADMIN_KEY, 'content-type': 'application/json' };
  const created = await fetch(`${p.url}/v1/admin/webhooks`, {
    method: 'POST',
    headers: adminHeaders,
    body: JSON.stringify({ url: receiver.url('/edge-test'), events: ['mcp_tool.enabled'] }),
  });
  const webhook = (await created.json()) as { id: string; secret: string };
  const sent = await fetch(`${p.url}/llm/v1/admin/webhooks/${webhook.id}/test`, { method: 'POST', headers: adminHeaders });
  t.is(sent.status, 202);
  const delivery = (await sent.json()) as { event_id: string };
  const [got] = (await receiver.until((rs) => rs.some((r) => r.headers['x-event-id'] === delivery.event_id), 30_000, 'test event')).filter((r) => r.headers['x-event-id'] === delivery.event_id);
  t.is(got!.headers['x-event-type'], 'webhook.test');
  t.is(got!.headers['x-webhook-id'], webhook.id);
  t.true(verifyWebhookSignature({ body: got!.body, signature: String(got!.headers['x-signature']), timestamp: String(got!.headers['x-timestamp']), secret: webhook.secret }).ok);
});
