import test from 'ava';
import { pino } from 'pino';
import { createDeliveriesStore, createWebhooksStore } from '../../domains/webhooks/index.js';
import type { BusMessage, Delivery, EventMessage } from '../../services/kit/index.js';
import { createFanoutHandler } from '../../workers/webhook-delivery/fanout.js';
import { startStack, type Stack } from './helpers.js';

// One event fans out to every matching subscription in one pass. PostgreSQL takes at most 65,535
// parameters per statement; the deliveries of an event with more subscriptions than one statement
// can insert must still all be recorded and queued, not fail the fan-out (and, after its retries,
// send the event to dead letters for every subscriber).
const SUBSCRIPTIONS = 7500;
let stack: Stack;

test.before(async () => {
  stack = await startStack({ bus: 'pg', worker: false });
});
test.after.always(async () => {
  await stack?.close();
});

test('an event matching more subscriptions than one insert statement can hold reaches every one of them', async (t) => {
  const knex = stack.svc.runtime.db.knex;
  const since = new Date(Date.now() - 60_000);
  const rows = Array.from({ length: SUBSCRIPTIONS }, (_, i) => ({
    id: `wh_many${String(i).padStart(20, '0')}`,
    url: `https://hooks.example.test/${i}`,
    events: JSON.stringify(['*']),
    secret_sealed: 'sealed',
    subscribed_at: since,
    created_at: since,
    updated_at: since,
  }));
  for (let i = 0; i < rows.length; i += 1000) await knex('webhooks').insert(rows.slice(i, i + 1000));

  let sent = 0;
  const fanout = createFanoutHandler({
    webhooks: createWebhooksStore(knex),
    deliveries: createDeliveriesStore(knex),
    bus: { ...stack.svc.runtime.bus, send: async () => void sent++ },
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'silent' }),
  });
  const settled: string[] = [];
  const delivery: Delivery = { ack: async () => void settled.push('ack'), retryAfter: async () => void settled.push('retry'), deadLetter: async () => void settled.push('dead') };
  const event: EventMessage = { id: 'evt_manysubscriptions000000000', type: 'model.added', occurred_at: new Date().toISOString(), data: { model_id: 'm' } };
  const message: BusMessage<EventMessage> = { id: event.id, routingKey: event.type, body: event, headers: {}, redelivered: false };

  await fanout(message, delivery);
  t.deepEqual(settled, ['ack']);
  const [{ count }] = await knex('webhook_deliveries').where({ event_id: event.id, queued: true }).count({ count: '*' });
  t.is(Number(count), SUBSCRIPTIONS);
  t.is(sent, SUBSCRIPTIONS);
});
