import test from 'ava';
import { pino } from 'pino';
import { createWebhooksStore, HeaderValueUnopenable, isSealedHeaderValue, openHeaders, sealPlainHeaders } from '../../domains/webhooks/index.js';
import { createSecretBox, loadMasterKey } from '../../services/kit/index.js';
import { receiverAndStack, type Receiver, type Stack } from './helpers.js';

// A subscription's custom headers (a receiver's `Authorization: Bearer …`) are write-only, like its
// secret: every answer of the admin API shows their names with the value "[redacted]", the values
// are stored sealed, and the delivery still sends the real values.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { bus: 'pg' } }, (r, s) => {
  receiver = r;
  stack = s;
});

const TOKEN = 'Bearer receiver-token-0123456789';
const knex = () => stack.svc.runtime.db.knex;

/** Sends a test event to the subscription and answers the headers the receiver got. */
async function deliveredHeaders(id: string) {
  const before = receiver.for(id).length;
  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  if (sent.status !== 202) throw new Error(JSON.stringify(sent.body));
  const all = await receiver.until(() => receiver.for(id).length > before, 30_000, `delivery to ${id}`);
  return all.filter((r) => r.headers['x-webhook-id'] === id)[before]!.headers;
}

test.serial('answers never carry a header value, the row holds them sealed, the receiver gets them', async (t) => {
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/auth'), events: ['*'], headers: { Authorization: TOKEN, 'X-Team': 'a' } });
  t.is(created.status, 201);
  const id = created.body.id as string;
  const redacted = { Authorization: '[redacted]', 'X-Team': '[redacted]' };
  t.deepEqual(created.body.headers, redacted);
  t.deepEqual((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.headers, redacted);
  const list = await stack.api('GET', '/v1/admin/webhooks?limit=100');
  t.deepEqual(list.body.data.find((w: { id: string }) => w.id === id).headers, redacted);
  for (const answer of [created, list]) t.false(JSON.stringify(answer.body).includes('receiver-token'));

  // At rest: the names in clear, each value sealed (not the value, nor containing it).
  const row = await knex()('webhooks').where({ id }).first();
  t.deepEqual(Object.keys(row.headers).sort(), ['Authorization', 'X-Team']);
  for (const value of Object.values(row.headers as Record<string, string>)) t.true(isSealedHeaderValue(value), value);
  t.false(JSON.stringify(row.headers).includes('receiver-token'));
  t.not(row.headers['X-Team'], 'a');

  const got = await deliveredHeaders(id);
  t.is(got.authorization, TOKEN);
  t.is(got['x-team'], 'a');

  // A value is bound to its header's name: moved to another name it does not open.
  const box = createSecretBox(loadMasterKey(stack.svc.runtime.config));
  t.throws(() => openHeaders(box, { id, headers: { 'X-Team': row.headers.Authorization } }), { instanceOf: HeaderValueUnopenable });
});

test.serial('PATCH: a given value replaces the stored one, "[redacted]" keeps it, a header not named is removed', async (t) => {
  const id = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/patch'), events: ['*'], headers: { Authorization: TOKEN, 'X-Team': 'a' } })).body.id as string;

  // An answer sent back as it is keeps every value (the name matched case-insensitively); X-Team dropped, X-New added.
  const kept = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { headers: { authorization: '[redacted]', 'X-New': 'n' } });
  t.is(kept.status, 200, JSON.stringify(kept.body));
  t.deepEqual(kept.body.headers, { authorization: '[redacted]', 'X-New': '[redacted]' });
  let got = await deliveredHeaders(id);
  t.is(got.authorization, TOKEN);
  t.is(got['x-new'], 'n');
  t.is(got['x-team'], undefined);

  const replaced = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { headers: { Authorization: 'Bearer new-token', 'X-New': '[redacted]' } });
  t.is(replaced.status, 200);
  got = await deliveredHeaders(id);
  t.is(got.authorization, 'Bearer new-token');
  t.is(got['x-new'], 'n');

  // The marker for a header that is not stored keeps nothing: 400 naming it, nothing changed.
  const unknown = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { headers: { Authorization: '[redacted]', 'X-Gone': '[redacted]' } });
  t.is(unknown.status, 400);
  t.like(unknown.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'headers.X-Gone' });
  // A kept value counts at its own length, not the marker's, in the 8 KiB bound.
  const big = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/big'), events: ['*'], headers: { 'X-Big': 'a'.repeat(2048) } })).body.id as string;
  const more = Object.fromEntries([1, 2, 3].map((i) => [`X-More-${i}`, 'b'.repeat(2040)]));
  const over = await stack.api('PATCH', `/v1/admin/webhooks/${big}`, { headers: { 'X-Big': '[redacted]', ...more } });
  t.is(over.status, 400);
  t.is(over.body.error.param, 'headers');
  t.regex(over.body.error.message, /8192 bytes/);
  got = await deliveredHeaders(id);
  t.is(got.authorization, 'Bearer new-token');

  // On create nothing is stored: the marker is refused as a value.
  const create = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/x'), events: ['*'], headers: { 'X-Team': '[redacted]' } });
  t.is(create.status, 400);
  t.like(create.body.error, { code: 'invalid_parameter', param: 'headers.X-Team' });
});

test.serial('a row stored before values were sealed is delivered and redacted as it is, and sealed at start', async (t) => {
  const id = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/legacy'), events: ['*'] })).body.id as string;
  // As the earlier code wrote it: values in clear.
  await knex()('webhooks').where({ id }).update({ headers: JSON.stringify({ Authorization: TOKEN }) });
  t.deepEqual((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.headers, { Authorization: '[redacted]' });
  t.is((await deliveredHeaders(id)).authorization, TOKEN);

  // What llm-api and the worker run when they start.
  const deps = { webhooks: createWebhooksStore(knex()), box: createSecretBox(loadMasterKey(stack.svc.runtime.config)), logger: pino({ level: 'silent' }) };
  t.is(await sealPlainHeaders(deps), 1);
  const row = await knex()('webhooks').where({ id }).first();
  t.true(isSealedHeaderValue(row.headers.Authorization));
  t.false(JSON.stringify(row.headers).includes('receiver-token'));
  t.is(await sealPlainHeaders(deps), 0, 'nothing left to seal');
  t.is((await deliveredHeaders(id)).authorization, TOKEN);
  t.deepEqual((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.headers, { Authorization: '[redacted]' });
});
