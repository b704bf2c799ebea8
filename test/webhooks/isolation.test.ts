import test from 'ava';
import { uniqueName } from '../helpers/env.js';
import { startReceiver, startStack, waitFor, type Receiver, type Stack } from './helpers.js';

// Two whole platforms (llm-api webhooks admin + delivery worker) on one RabbitMQ, with the same
// BUS_EXCHANGE and different BUS_QUEUE_PREFIX: one setting must isolate them. Each has a '*'
// subscription and a spy queue bound with '#'; neither may see the other's events, content
// included, at the bus, in its deliveries or at its receiver.
const sharedExchange = `${uniqueName('iso')}.events`;
const platforms: { stack: Stack; receiver: Receiver; spied: string[]; emitted: string[] }[] = [];

test.before(async () => {
  for (let i = 0; i < 2; i++) {
    const receiver = await startReceiver();
    const stack = await startStack({ bus: 'amqp', env: { BUS_EXCHANGE: sharedExchange } });
    const spied: string[] = [];
    await stack.svc.runtime.bus.consume({ queue: 'spy', bindings: ['#'], prefetch: 1 }, async (message, delivery) => {
      spied.push(message.id);
      await delivery.ack();
    });
    platforms.push({ stack, receiver, spied, emitted: [] });
  }
});

test.after.always(async () => {
  for (const p of platforms) {
    await p.stack.close().catch(() => {});
    await p.receiver.close();
  }
});

test('two platforms on one RabbitMQ, told apart only by BUS_QUEUE_PREFIX, see nothing of each other', async (t) => {
  const [a, b] = platforms as [(typeof platforms)[0], (typeof platforms)[0]];
  for (const p of platforms) {
    const created = await p.stack.api('POST', '/v1/admin/webhooks', { url: p.receiver.url('/all'), events: ['*'] });
    t.is(created.status, 201);
  }
  // Interleaved: A, B, A, B, A, B.
  for (let i = 0; i < 3; i++) {
    for (const p of [a, b]) p.emitted.push(await p.stack.emit('conversation.created', { title: `from ${p === a ? 'A' : 'B'} #${i}` }));
  }
  for (const p of platforms) {
    await p.receiver.until((all) => p.emitted.every((id) => all.some((r) => r.headers['x-event-id'] === id)), 30_000, 'own events delivered');
    // The spy queue is FIFO: once it holds the last own event, any foreign event routed earlier would be there too.
    await waitFor(() => p.spied.includes(p.emitted.at(-1)!), 15_000, 'spy saw the last own event');
  }
  for (const [self, other] of [[a, b], [b, a]] as const) {
    t.deepEqual(self.spied, self.emitted, 'the bus handed this platform only its own events');
    t.deepEqual([...self.receiver.eventIds()].sort(), [...self.emitted].sort(), 'the receiver got only its own events');
    t.false(self.receiver.requests.some((r) => r.body.includes(other === a ? 'from A' : 'from B')), 'no foreign content');
    const deliveries = await self.stack.svc.runtime.db.knex('webhook_deliveries').pluck('event_id');
    t.deepEqual([...deliveries].sort(), [...self.emitted].sort(), 'no delivery was made for a foreign event');
  }
});
