import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, type DeliveryJob } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey, setEgressResolver, type BusMessage, type Delivery, type Resolver } from '../../services/kit/index.js';
import { createDeliveryHandler } from '../../workers/webhook-delivery/deliver.js';
import { startStack, type Stack } from './helpers.js';

// WEBHOOK_TIMEOUT_MS bounds the whole attempt, the resolution of the receiver's host name
// included: a DNS server that never answers (or answers only after minutes) must not hold the
// job, its subscription's concurrency slot and a prefetch slot for ever. The attempt ends as a
// timeout, recorded and retried like any other.
let stack: Stack;
let dnsAnswers = true;
const pendingLookups: Array<() => void> = [];
const resolver: Resolver = (host) =>
  dnsAnswers
    ? Promise.resolve(host === 'hooks.example.test' ? [{ address: '93.184.215.14', family: 4 }] : [])
    : new Promise((resolve) => pendingLookups.push(() => resolve([]))); // answers only when the test ends

// The admin API's check of a URL at create and PATCH is bounded by WEBHOOK_TIMEOUT_MS too: the
// process-wide stub never answers for `silent.example.test` (and finds no other name).
const ADMIN_TIMEOUT_MS = 300;
const silentLookups: Array<() => void> = [];

test.before(async () => {
  setEgressResolver((host) => (host === 'silent.example.test' ? new Promise((resolve) => silentLookups.push(() => resolve([]))) : Promise.resolve([])));
  stack = await startStack({ bus: 'pg', worker: false, env: { WEBHOOK_TIMEOUT_MS: String(ADMIN_TIMEOUT_MS) } });
});
test.after.always(async () => {
  for (const answer of pendingLookups) answer();
  for (const answer of silentLookups) answer();
  setEgressResolver(null);
  await stack?.close();
});

/** `call`, or 'still resolving' after 100 times the timeout (without a bound the request never ends). */
async function bounded<T>(call: Promise<T>): Promise<T | 'still resolving'> {
  let bound: NodeJS.Timeout | undefined;
  const ended = await Promise.race([call, new Promise<'still resolving'>((resolve) => (bound = setTimeout(() => resolve('still resolving'), ADMIN_TIMEOUT_MS * 100)))]);
  clearTimeout(bound);
  return ended;
}

test('creating or re-pointing a webhook at a host name whose DNS never answers ends at WEBHOOK_TIMEOUT_MS, accepted like a name that does not resolve', async (t) => {
  const created = await bounded(stack.api('POST', '/v1/admin/webhooks', { url: 'https://silent.example.test/in', events: ['*'] }));
  if (created === 'still resolving') return t.fail('create is still waiting for DNS');
  t.is(created.status, 201, JSON.stringify(created.body));
  t.is(created.body.url, 'https://silent.example.test/in');

  const other = await stack.api('POST', '/v1/admin/webhooks', { url: 'https://elsewhere.example.test/in', events: ['*'] });
  t.is(other.status, 201, JSON.stringify(other.body));
  const patched = await bounded(stack.api('PATCH', `/v1/admin/webhooks/${other.body.id}`, { url: 'https://silent.example.test/other' }));
  if (patched === 'still resolving') return t.fail('PATCH is still waiting for DNS');
  t.is(patched.status, 200, JSON.stringify(patched.body));
  t.is(patched.body.url, 'https://silent.example.test/other');
  t.true(silentLookups.length >= 2, 'both checks asked the DNS');
});

test('a host name whose DNS never answers ends the attempt at WEBHOOK_TIMEOUT_MS as a retried timeout', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const timeoutMs = 300;
  const handle = createDeliveryHandler({
    deliveries: createDeliveriesStore(knex),
    box: createSecretBox(loadMasterKey(stack.svc.runtime.config)),
    guard: createEgressGuard({ resolver }),
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'silent' }),
    schedule: [1000],
    timeoutMs,
    concurrencyPerSubscription: 2,
    prefetch: 8,
    busyDelayMs: 100,
  });
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: 'https://hooks.example.test/in', events: ['*'] });
  t.is(hook.status, 201, JSON.stringify(hook.body));
  const sent = await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`);
  t.is(sent.status, 202);

  dnsAnswers = false;
  const outcomes: string[] = [];
  const delivery: Delivery = {
    ack: async () => void outcomes.push('ack'),
    retryAfter: async () => void outcomes.push('retry'),
    deadLetter: async () => void outcomes.push('dead'),
  };
  const message: BusMessage<DeliveryJob> = { id: sent.body.id, routingKey: 'x', body: { delivery_id: sent.body.id }, headers: { 'x-webhook-attempt': '0' }, redelivered: false };
  // A generous bound (100 times the timeout): without it the handler never returns.
  let bound: NodeJS.Timeout | undefined;
  const ended = await Promise.race([
    handle(message, delivery).then(() => 'ended'),
    new Promise<string>((resolve) => (bound = setTimeout(() => resolve('still resolving'), timeoutMs * 100))),
  ]);
  clearTimeout(bound);
  t.is(ended, 'ended');
  t.deepEqual(outcomes, ['retry']);
  const recorded = (await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${sent.body.id}`)).body;
  t.like(recorded, { status: 'pending', attempt_count: 1, last_error: `timed out after ${timeoutMs} ms` });
  t.like(recorded.attempts[0], { outcome: 'retry', status_code: null });
});
