import { randomBytes } from 'node:crypto';
import test from 'ava';
import { pino } from 'pino';
import { createWebhooksStore, isSealedHeaderValue, sealPlainHeaders } from '../../domains/webhooks/index.js';
import { createSecretBox, loadMasterKey } from '../../services/kit/index.js';
import { receiverAndStack, waitFor, type Receiver, type Stack } from './helpers.js';

// Sealing is marked per value (the secret box's own `v1.…` format), not per row: during a rolling
// upgrade an older llm-api writes clear values into a row whose other values are sealed, and the
// delivery sends both right; start-up sealing seals just the clear ones.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { stack: { bus: 'pg' } }, (r, s) => {
  receiver = r;
  stack = s;
});

const TOKEN = 'Bearer receiver-token-0123456789';
const knex = () => stack.svc.runtime.db.knex;
const sealDeps = () => ({ webhooks: createWebhooksStore(knex()), box: createSecretBox(loadMasterKey(stack.svc.runtime.config)), logger: pino({ level: 'silent' }) });

async function deliveredHeaders(id: string) {
  const before = receiver.for(id).length;
  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  if (sent.status !== 202) throw new Error(JSON.stringify(sent.body));
  await receiver.until(() => receiver.for(id).length > before, 30_000, `delivery to ${id}`);
  return receiver.for(id)[before]!.headers;
}

test.serial('no per-row sealing flag exists: the migrations add no headers_sealed column', async (t) => {
  const columns = await knex()('information_schema.columns').where({ table_schema: knex().raw('current_schema()'), table_name: 'webhooks' }).pluck('column_name');
  t.true(columns.includes('headers'));
  t.false(columns.includes('headers_sealed'));
});

test.serial('a clear value written by older code into a row of sealed values is sent as it is, then sealed alone at start', async (t) => {
  const id = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/mixed'), events: ['*'], headers: { 'X-Team': 'a', Authorization: 'Bearer old' } })).body.id as string;
  const sealed = (await knex()('webhooks').where({ id }).first()).headers as Record<string, string>;
  t.true(isSealedHeaderValue(sealed['X-Team']!));
  // What an llm-api from before values were sealed does on PATCH: the answer it showed (the stored
  // X-Team as it is) sent back, and a new Authorization written in clear.
  await knex()('webhooks').where({ id }).update({ headers: JSON.stringify({ 'X-Team': sealed['X-Team'], Authorization: TOKEN }) });

  const got = await deliveredHeaders(id);
  t.is(got.authorization, TOKEN);
  t.is(got['x-team'], 'a');

  // Start-up sealing: the clear value is sealed, the sealed one kept byte for byte.
  t.true((await sealPlainHeaders(sealDeps())) >= 1);
  const after = (await knex()('webhooks').where({ id }).first()).headers as Record<string, string>;
  t.is(after['X-Team'], sealed['X-Team']);
  t.true(isSealedHeaderValue(after.Authorization!));
  t.false(JSON.stringify(after).includes('receiver-token'));
  t.is(await sealPlainHeaders(sealDeps()), 0, 'nothing left to seal');
  const again = await deliveredHeaders(id);
  t.is(again.authorization, TOKEN);
  t.is(again['x-team'], 'a');
});

test.serial('a value in the sealed format that does not open ends the delivery with a message naming it, as an unopenable secret does', async (t) => {
  const id = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/foreign'), events: ['*'], headers: { Authorization: TOKEN, 'X-Team': 'a' } })).body.id as string;
  // Sealed under another MASTER_KEY.
  const foreign = createSecretBox(randomBytes(32)).seal(TOKEN, `${id}/headers/Authorization`);
  const stored = (await knex()('webhooks').where({ id }).first()).headers as Record<string, string>;
  await knex()('webhooks').where({ id }).update({ headers: JSON.stringify({ ...stored, Authorization: foreign }) });

  // Start-up sealing leaves it alone (it is in the sealed format: not a clear value to seal).
  await sealPlainHeaders(sealDeps());
  t.is(((await knex()('webhooks').where({ id }).first()).headers as Record<string, string>).Authorization, foreign);

  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  t.is(sent.status, 202);
  const row: { status: string; last_error: string | null } = await waitFor(async () => {
    const current = await knex()('webhook_deliveries').where({ webhook_id: id }).first();
    return current && current.status !== 'pending' ? current : undefined;
  }, 30_000, 'the delivery ended');
  t.is(row?.status, 'failed');
  t.regex(row?.last_error ?? '', /webhook header Authorization is sealed but does not open with this MASTER_KEY/);
  t.is(receiver.for(id).length, 0, 'nothing sent without the registered value');

  // Setting the headers again (a value given) delivers.
  const fixed = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { headers: { Authorization: TOKEN, 'X-Team': '[redacted]' } });
  t.is(fixed.status, 200, JSON.stringify(fixed.body));
  t.is((await deliveredHeaders(id)).authorization, TOKEN);
});
