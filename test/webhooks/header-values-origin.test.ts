import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, createWebhooksStore, type WebhooksStore } from '../../domains/webhooks/index.js';
import { updateWebhook, type WebhooksDeps } from '../../services/llm-api/webhooks/domain.js';
import { ApiError, createEgressGuard, createSecretBox, loadMasterKey, systemClock } from '../../services/kit/index.js';
import { startReceiver, startStack, type Receiver, type Stack } from './helpers.js';

// Custom header values (a receiver's `Authorization: Bearer …`) belong to the receiver they were
// given for: a PATCH that moves the webhook to another origin (scheme, host or port) never carries
// them over, so repointing a webhook cannot make the platform send the stored token to another host.
let stack: Stack;
let home: Receiver;
let other: Receiver;

test.before(async () => {
  home = await startReceiver();
  other = await startReceiver();
  stack = await startStack({ bus: 'pg' });
});
test.after.always(async () => {
  await stack?.close();
  await home?.close();
  await other?.close();
});

const TOKEN = 'Bearer receiver-token-0123456789';

/** Sends a test event to the subscription and answers the headers `receiver` got. */
async function deliveredHeaders(receiver: Receiver, id: string) {
  const before = receiver.for(id).length;
  const sent = await stack.api('POST', `/v1/admin/webhooks/${id}/test`);
  if (sent.status !== 202) throw new Error(JSON.stringify(sent.body));
  await receiver.until(() => receiver.for(id).length > before, 30_000, `delivery to ${id}`);
  return receiver.for(id)[before]!.headers;
}

const create = async (headers?: Record<string, string>) => {
  const res = await stack.api('POST', '/v1/admin/webhooks', { url: home.url('/a'), events: ['*'], ...(headers ? { headers } : {}) });
  if (res.status !== 201) throw new Error(JSON.stringify(res.body));
  return res.body.id as string;
};

test.serial('a PATCH to another origin without headers is a 400 naming headers, and changes nothing', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const moved = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: other.url('/collect') });
  t.is(moved.status, 400, JSON.stringify(moved.body));
  t.like(moved.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'headers' });
  t.regex(moved.body.error.message, /headers: \{\}/);
  t.is((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.url, home.url('/a'));
  // The stored token still goes only where it was given for.
  t.is((await deliveredHeaders(home, id)).authorization, TOKEN);
  t.is(other.for(id).length, 0);
});

test.serial('a PATCH to another origin cannot keep a stored value with "[redacted]": 400 naming the header', async (t) => {
  const id = await create({ Authorization: TOKEN, 'X-Team': 'a' });
  const moved = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: other.url('/collect'), headers: { Authorization: '[redacted]', 'X-Team': 'b' } });
  t.is(moved.status, 400, JSON.stringify(moved.body));
  t.like(moved.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'headers.Authorization' });
  t.is((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.url, home.url('/a'));

  // (`other` is another port of the same host: another origin.) The same origin spelt in capitals is the same origin.
  const samePortUpper = home.url('/b').replace('http://', 'HTTP://');
  const samePath = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: samePortUpper });
  t.is(samePath.status, 200, JSON.stringify(samePath.body));
});

test.serial('a PATCH to another origin with every value given, or headers: {}, moves the webhook', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const given = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: other.url('/collect'), headers: { Authorization: 'Bearer for-the-other-host' } });
  t.is(given.status, 200, JSON.stringify(given.body));
  t.is((await deliveredHeaders(other, id)).authorization, 'Bearer for-the-other-host');

  const id2 = await create({ Authorization: TOKEN });
  const cleared = await stack.api('PATCH', `/v1/admin/webhooks/${id2}`, { url: other.url('/collect'), headers: {} });
  t.is(cleared.status, 200, JSON.stringify(cleared.body));
  t.deepEqual(cleared.body.headers, {});
  t.is((await deliveredHeaders(other, id2)).authorization, undefined);
});

test.serial('same origin keeps the stored values; a webhook without custom headers moves freely', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const path = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: home.url('/elsewhere') });
  t.is(path.status, 200, JSON.stringify(path.body));
  t.is((await deliveredHeaders(home, id)).authorization, TOKEN);
  const kept = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, { url: home.url('/third'), headers: { Authorization: '[redacted]' } });
  t.is(kept.status, 200, JSON.stringify(kept.body));
  t.is((await deliveredHeaders(home, id)).authorization, TOKEN);

  const bare = await create();
  const moved = await stack.api('PATCH', `/v1/admin/webhooks/${bare}`, { url: other.url('/bare') });
  t.is(moved.status, 200, JSON.stringify(moved.body));
  t.is((await deliveredHeaders(other, bare))['x-webhook-id'], bare);
});

/** Domain deps whose store runs `meanwhile` (another PATCH, through the API) between this PATCH's read and its write. */
function racingDeps(meanwhile: (webhookId: string) => Promise<void>): WebhooksDeps {
  const knex = stack.svc.runtime.db.knex;
  const store = createWebhooksStore(knex);
  let raced = false;
  const racing: WebhooksStore = {
    ...store,
    async get(webhookId) {
      const stale = await store.get(webhookId);
      if (!raced) {
        raced = true;
        await meanwhile(webhookId);
      }
      return stale;
    },
  };
  return {
    webhooks: racing,
    guard: createEgressGuard({ allowHosts: ['127.0.0.1'] }),
    deliveries: createDeliveriesStore(knex),
    box: createSecretBox(loadMasterKey(stack.svc.runtime.config)),
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    secretGraceSeconds: 0,
    checkTimeoutMs: 1000,
  } as unknown as WebhooksDeps;
}

const patchOk = async (id: string, body: unknown) => {
  const res = await stack.api('PATCH', `/v1/admin/webhooks/${id}`, body);
  if (res.status !== 200) throw new Error(JSON.stringify(res.body));
};

test.serial('a PATCH keeping a stored value, racing one that moves the webhook, is a 409 and never sends the value to the new host', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const deps = racingDeps((webhookId) => patchOk(webhookId, { url: other.url('/collect'), headers: { Authorization: 'Bearer for-the-other-host' } }));
  const error = await t.throwsAsync(updateWebhook(deps, id, { headers: { Authorization: '[redacted]', 'X-Team': 'a' } }));
  t.true(error instanceof ApiError);
  t.is((error as ApiError).status, 409);
  t.is((error as ApiError).param, 'url');
  t.is((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.url, other.url('/collect'));
  // The new host gets the value given for it, never the old receiver's token.
  t.is((await deliveredHeaders(other, id)).authorization, 'Bearer for-the-other-host');
});

test.serial('a PATCH moving the webhook, racing one that adds a header for the old host, is a 409 and the token stays with the old host', async (t) => {
  const id = await create();
  const deps = racingDeps((webhookId) => patchOk(webhookId, { headers: { Authorization: TOKEN } }));
  const error = await t.throwsAsync(updateWebhook(deps, id, { url: other.url('/collect') }));
  t.true(error instanceof ApiError);
  t.is((error as ApiError).status, 409);
  t.is((error as ApiError).param, 'headers');
  const stored = (await stack.api('GET', `/v1/admin/webhooks/${id}`)).body;
  t.is(stored.url, home.url('/a'));
  t.is((await deliveredHeaders(home, id)).authorization, TOKEN);
  t.is(other.for(id).length, 0);
});

test.serial('a PATCH within the same origin, racing one that moves the webhook with new values, is a 409 and the new values never go to the old host', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const deps = racingDeps((webhookId) => patchOk(webhookId, { url: other.url('/collect'), headers: { Authorization: 'Bearer for-the-other-host' } }));
  // Judged "same origin" against the url read before the move.
  const error = await t.throwsAsync(updateWebhook(deps, id, { url: home.url('/b') }));
  t.true(error instanceof ApiError);
  t.is((error as ApiError).status, 409);
  t.is((error as ApiError).param, 'url');
  t.is((await stack.api('GET', `/v1/admin/webhooks/${id}`)).body.url, other.url('/collect'));
  t.is((await deliveredHeaders(other, id)).authorization, 'Bearer for-the-other-host');
  t.is(home.for(id).length, 0);
});

test.serial('a PATCH that changes neither url nor headers is not refused by a concurrent one', async (t) => {
  const id = await create({ Authorization: TOKEN });
  const deps = racingDeps((webhookId) => patchOk(webhookId, { headers: { Authorization: 'Bearer rotated' } }));
  const updated = await updateWebhook(deps, id, { events: ['model.added'] });
  t.deepEqual(updated.events, ['model.added']);
});
