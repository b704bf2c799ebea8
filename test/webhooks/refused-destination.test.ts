import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, type DeliveryJob } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey, setEgressResolver, type BusMessage, type Delivery, type Resolver } from '../../services/kit/index.js';
import { createDeliveryHandler } from '../../workers/webhook-delivery/deliver.js';
import { startStack, type Stack } from './helpers.js';

// A subscription URL may carry a token in its path (many receivers authenticate that way). When the
// egress guard refuses the destination at delivery (its name now resolves to a private address) or
// the name no longer resolves, the worker's log lines and the recorded error name the host, never
// the path or query.
let stack: Stack;
const names: Record<string, string[]> = {};
const resolver: Resolver = async (host) => {
  const answers = names[host];
  if (!answers) throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: 4 }));
};

test.before(async () => {
  setEgressResolver(resolver);
  stack = await startStack({ bus: 'pg', worker: false });
});
test.after.always(async () => {
  setEgressResolver(null);
  await stack?.close();
});

test('a refused or unresolvable destination is logged and recorded by its host only', async (t) => {
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const knex = stack.svc.runtime.db.knex;
  const handle = createDeliveryHandler({
    deliveries: createDeliveriesStore(knex),
    box: createSecretBox(loadMasterKey(stack.svc.runtime.config)),
    guard: createEgressGuard(),
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'info' }, sink),
    schedule: [1000],
    timeoutMs: 3000,
    concurrencyPerSubscription: 2,
    prefetch: 8,
    busyDelayMs: 100,
  });
  const attempt = async (url: string, host: string, atDelivery: string[] | undefined) => {
    names[host] = ['93.184.215.14']; // public when registered
    const hook = await stack.api('POST', '/v1/admin/webhooks', { url, events: ['*'] });
    t.is(hook.status, 201, JSON.stringify(hook.body));
    if (atDelivery) names[host] = atDelivery;
    else delete names[host];
    const sent = await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`);
    const delivery: Delivery = { ack: async () => {}, retryAfter: async () => {}, deadLetter: async () => {} };
    const message: BusMessage<DeliveryJob> = { id: sent.body.id, routingKey: 'x', body: { delivery_id: sent.body.id }, headers: { 'x-webhook-attempt': '0' }, redelivered: false };
    await handle(message, delivery);
    return (await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${sent.body.id}`)).body;
  };

  // Re-pointed to a private address after registration: refused, final.
  const refused = await attempt('https://rebound.example.test/services/T0001/B0001/TOPSECRETTOKEN?sig=QUERYSECRET', 'rebound.example.test', ['10.0.0.5']);
  t.like(refused, { status: 'failed', attempt_count: 1 });
  t.is(refused.last_error, 'refused destination https://rebound.example.test: resolves to a private or special-purpose IPv4 address');
  // No longer resolving: a network error, retried.
  const gone = await attempt('https://gone.example.test/hooks/OTHERSECRETTOKEN', 'gone.example.test', undefined);
  t.like(gone, { status: 'pending', attempt_count: 1 });
  t.is(gone.last_error, 'refused destination https://gone.example.test: host name does not resolve');

  const warns = lines.filter((l) => l.level === 40);
  t.is(warns.length, 2);
  t.regex(warns[0].error, /rebound\.example\.test/);
  const logged = JSON.stringify(lines);
  for (const secret of ['SECRETTOKEN', 'QUERYSECRET', 'T0001', '/hooks/']) t.false(logged.includes(secret), secret);
  const recorded = JSON.stringify(await knex('webhook_delivery_attempts').select('error', 'response_excerpt'));
  t.false(recorded.includes('SECRETTOKEN'));
});
