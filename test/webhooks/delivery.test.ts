import test from 'ava';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { llmApiService } from '../../services/llm-api/service.js';
import { createTestUser } from '../helpers/users.js';
import { receiverAndStack, waitFor, type Receiver, type Stack } from './helpers.js';

// Delivery end to end over real RabbitMQ and PostgreSQL, with the real llm-api service: a change
// commits with its outbox row → topic exchange → fan-out → delivery job → signed POST to a local receiver.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { service: llmApiService } }, (r, s) => {
  receiver = r;
  stack = s;
});

test.serial('a local receiver gets conversation.created with a valid signature and every delivery header', async (t) => {
  const secret = 'whsec_test_secret_0123456789abcdef';
  const created = await stack.api('POST', '/v1/admin/webhooks', {
    url: receiver.url('/created'),
    events: ['conversation.created'],
    secret,
    headers: { 'X-Tenant': 'acme', Authorization: 'Bearer receiver-token' },
  });
  t.is(created.status, 201);
  const webhookId = created.body.id as string;
  // A user creates a conversation through the conversations endpoint; its commit emits the event.
  const user = await createTestUser(stack.svc.runtime.db.knex);
  const conv = await stack.api('POST', '/v1/conversations', { title: 'Hello', metadata: { a: 'b' } }, user);
  t.is(conv.status, 200, JSON.stringify(conv.body));
  const eventId = await waitFor(async () => {
    const row = await stack.svc.runtime.db.knex('outbox_events').where({ type: 'conversation.created' }).whereRaw("data->>'conversation_id' = ?", [conv.body.id]).first();
    return row?.id as string | undefined;
  });
  const [got] = await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === eventId)).then((all) => all.filter((r) => r.headers['x-event-id'] === eventId));
  t.truthy(got);
  const h = got!.headers;
  t.is(got!.method, 'POST');
  t.is(got!.path, '/created');
  t.regex(String(h['content-type']), /^application\/json/);
  t.is(Number(h['content-length']), Buffer.byteLength(got!.body));
  t.is(h['x-event-type'], 'conversation.created');
  t.is(h['x-event-id'], eventId);
  t.is(h['x-webhook-id'], webhookId);
  t.is(h['x-tenant'], 'acme');
  t.is(h.authorization, 'Bearer receiver-token');
  t.regex(String(h['x-timestamp']), /^\d{10}$/);
  t.regex(String(h['x-signature']), /^sha256=[0-9a-f]{64}$/);
  t.deepEqual(verifyWebhookSignature({ body: got!.body, signature: String(h['x-signature']), timestamp: String(h['x-timestamp']), secret }), { ok: true });
  t.like(verifyWebhookSignature({ body: got!.body, signature: String(h['x-signature']), timestamp: String(h['x-timestamp']), secret: 'wrong-secret-wrong-secret' }), { ok: false });

  // The envelope of SPEC.md 6.3.
  t.deepEqual(Object.keys(got!.json).sort(), ['data', 'id', 'retry_count', 'timestamp', 'type', 'webhook_id']);
  t.is(got!.json.type, 'conversation.created');
  t.is(got!.json.id, eventId);
  t.regex(got!.json.id, /^evt_/);
  t.is(got!.json.webhook_id, webhookId);
  t.is(got!.json.retry_count, 0);
  t.true(!Number.isNaN(Date.parse(got!.json.timestamp)));
  t.like(got!.json.data, { conversation_id: conv.body.id, user_id: user.id, title: 'Hello', metadata: { a: 'b' } });
  t.true(!Number.isNaN(Date.parse(got!.json.data.created_at)));

  // The attempt is recorded and visible to the admin.
  const list = await waitFor(async () => {
    const r = await stack.api('GET', `/v1/admin/webhooks/${webhookId}/deliveries`);
    return r.body.data[0]?.status === 'delivered' ? r : undefined;
  });
  const d = list.body.data[0];
  t.is(list.body.object, 'list');
  t.is(d.event_id, eventId);
  t.is(d.attempt_count, 1);
  t.is(d.attempts.length, 1);
  t.like(d.attempts[0], { attempt: 1, retry_count: 0, outcome: 'delivered', status_code: 200, error: null });
  t.is(typeof d.attempts[0].duration_ms, 'number');
  t.is(d.next_attempt_at, null);
  // The secret never appears in what the admin API returns after creation.
  t.false(JSON.stringify(list.body).includes(secret));
});

test.serial('patterns: exact, family and * subscriptions match; inactive and non-matching ones get nothing, nor does any an internal media event', async (t) => {
  const make = async (events: string[], active = true) => {
    const r = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/patterns'), events, active });
    t.is(r.status, 201);
    return r.body.id as string;
  };
  const exact = await make(['message.sent']);
  const family = await make(['conversation.*']);
  const star = await make(['*']);
  const inactive = await make(['*'], false);
  const other = await make(['model.added', 'mcp_tool.disabled']);
  const types = ['conversation.created', 'conversation.deleted', 'message.sent', 'model.updated', 'mcp_tool.enabled'];
  const ids: Record<string, string> = {};
  // An internal type on the same exchange, first: `*` means the ten event types, not this one.
  await stack.emit('media.deleted', { media_id: 'jan_x', sha256: 'a'.repeat(64) });
  for (const type of types) ids[type] = await stack.emit(type, { n: type });

  // `*` gets all five; fan-out made every delivery of an event in the same step, so once `*`
  // has all of them every other subscription's deliveries exist too.
  await receiver.until(() => receiver.for(star).length >= 5 && receiver.for(family).length >= 2 && receiver.for(exact).length >= 1);
  const typesOf = (id: string) => receiver.for(id).map((r) => r.headers['x-event-type']).sort();
  t.deepEqual(typesOf(star), [...types].sort());
  t.deepEqual(typesOf(family), ['conversation.created', 'conversation.deleted']);
  t.deepEqual(typesOf(exact), ['message.sent']);
  t.deepEqual(receiver.for(inactive), []);
  t.deepEqual(receiver.for(other), []);
  const knex = stack.svc.runtime.db.knex;
  const count = async (webhookId: string) => Number((await knex('webhook_deliveries').where({ webhook_id: webhookId }).count({ n: '*' }))[0]!.n);
  t.is(await count(inactive), 0);
  t.is(await count(other), 0);
  t.is(await count(star), 5);
  // One event, one id: every subscriber of message.sent saw the same X-Event-ID.
  t.deepEqual(
    receiver.requests.filter((r) => r.headers['x-event-type'] === 'message.sent').map((r) => r.headers['x-event-id']),
    [ids['message.sent'], ids['message.sent']],
  );
  // Deactivate `*`: later events reach only the others.
  t.is((await stack.api('PATCH', `/v1/admin/webhooks/${star}`, { active: false })).status, 200);
  const after = await stack.emit('message.sent', {});
  await receiver.until(() => receiver.for(exact).some((r) => r.headers['x-event-id'] === after));
  t.false(receiver.for(star).some((r) => r.headers['x-event-id'] === after));
  for (const id of [exact, family, star, inactive, other]) await stack.api('DELETE', `/v1/admin/webhooks/${id}`);
});

test.serial('after rotate-secret X-Signature is one signature of the new secret and X-Signature-Previous carries the old one during the grace period, then goes', async (t) => {
  const oldSecret = 'old-secret-0123456789-abcdefgh';
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/rotate'), events: ['model.added'], secret: oldSecret });
  const id = created.body.id as string;
  const rotated = await stack.api('POST', `/v1/admin/webhooks/${id}/rotate-secret`);
  t.is(rotated.status, 200);
  const newSecret = rotated.body.secret as string;
  t.regex(newSecret, /^whsec_[0-9A-Za-z]{32,}$/);
  t.is(typeof rotated.body.previous_secret_expires_at, 'number');

  const e1 = await stack.emit('model.added', { model_id: 'm1' });
  const [r1] = (await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === e1))).filter((r) => r.headers['x-event-id'] === e1);
  t.regex(String(r1!.headers['x-signature']), /^sha256=[0-9a-f]{64}$/);
  t.regex(String(r1!.headers['x-signature-previous']), /^sha256=[0-9a-f]{64}$/);
  // A receiver following the plain scheme (X-Signature only) verifies with the new secret.
  const plain = (secret: string, r: typeof r1) =>
    verifyWebhookSignature({ body: r!.body, signature: String(r!.headers['x-signature']), timestamp: String(r!.headers['x-timestamp']), secret }).ok;
  const check = (secret: string, r = r1!) =>
    verifyWebhookSignature({
      body: r.body,
      signature: r.headers['x-signature'] as string | undefined,
      previousSignature: r.headers['x-signature-previous'] as string | undefined,
      timestamp: String(r.headers['x-timestamp']),
      secret,
    }).ok;
  t.true(plain(newSecret, r1));
  t.false(plain(oldSecret, r1));
  // The shipped verifier accepts either header: a receiver still on the old secret keeps working.
  t.true(check(newSecret));
  t.true(check(oldSecret));

  // Grace over (moved into the past directly): only the new secret signs.
  await stack.svc.runtime.db.knex('webhooks').where({ id }).update({ previous_secret_expires_at: new Date(Date.now() - 1000) });
  const e2 = await stack.emit('model.added', { model_id: 'm2' });
  const [r2] = (await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === e2))).filter((r) => r.headers['x-event-id'] === e2);
  t.regex(String(r2!.headers['x-signature']), /^sha256=[0-9a-f]{64}$/);
  t.is(r2!.headers['x-signature-previous'], undefined);
  t.true(check(newSecret, r2));
  t.false(check(oldSecret, r2));

  // The stored secret is sealed, not in clear text.
  const row = await stack.svc.runtime.db.knex('webhooks').where({ id }).first();
  t.false(JSON.stringify(row).includes(newSecret));
  t.false(JSON.stringify(row).includes(oldSecret));
  await stack.api('DELETE', `/v1/admin/webhooks/${id}`);
});

test.serial('a redelivered event does not create a second delivery (fan-out dedupe)', async (t) => {
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/dedupe'), events: ['message.deleted'] });
  const id = created.body.id as string;
  const eventId = await stack.emit('message.deleted', { message_id: 'msg_1' });
  await receiver.until(() => receiver.for(id).length === 1);
  // The same event published again (as the relay would after a lost confirm).
  const row = await stack.svc.runtime.db.knex('outbox_events').where({ id: eventId }).first();
  await stack.svc.runtime.bus.publish('message.deleted', { id: eventId, type: 'message.deleted', occurred_at: new Date(row.occurred_at).toISOString(), data: row.data }, { messageId: eventId });
  const marker = await stack.emit('message.deleted', { message_id: 'msg_2' });
  await receiver.until(() => receiver.for(id).some((r) => r.headers['x-event-id'] === marker));
  t.is(receiver.for(id).filter((r) => r.headers['x-event-id'] === eventId).length, 1);
  const n = await stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: id, event_id: eventId }).count({ n: '*' });
  t.is(Number(n[0]!.n), 1);
});
