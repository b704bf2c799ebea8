import test from 'ava';
import type { DeliveryJob } from '../../domains/webhooks/index.js';
import type { BusMessage, Delivery } from '../../services/kit/index.js';
import { directDeliveryHandler, receiverAndStack, type Receiver, type Stack } from './helpers.js';

// A subscription deactivated while a job of it waits in the worker for the subscription's
// concurrency slot: when the job gets the slot, the claim sees the subscription as it is now and
// ends the delivery `failed` ("webhook is inactive") without an attempt. The handler is driven
// directly (no worker runs), so the test knows the job is waiting before it deactivates.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { respond: (_r, index) => (index === 0 ? 'hang' : 200), stack: { bus: 'pg', worker: false } }, (r, s) => {
  receiver = r;
  stack = s;
});

test('a job waiting for its subscription\'s slot when the subscription is deactivated ends failed, without an attempt', async (t) => {
  // The first read of the second job (its "still active?" check before the wait) is announced (`readOf`).
  const { handle, readOf } = directDeliveryHandler(stack);
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/hook'), events: ['*'] });
  const first = (await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`)).body;
  const second = (await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`)).body;
  const secondPassedItsCheck = readOf(second.id);
  const outcomes: Record<string, string[]> = { [first.id]: [], [second.id]: [] };
  const run = (id: string) => {
    const delivery: Delivery = {
      ack: async () => void outcomes[id]!.push('ack'),
      retryAfter: async () => void outcomes[id]!.push('retry'),
      deadLetter: async () => void outcomes[id]!.push('dead'),
    };
    const message: BusMessage<DeliveryJob> = { id, routingKey: 'x', body: { delivery_id: id }, headers: { 'x-webhook-attempt': '0' }, redelivered: false };
    return handle(message, delivery);
  };

  // The first job's attempt hangs at the receiver and holds the subscription's only slot.
  const firstDone = run(first.id);
  await receiver.until((all) => all.length === 1);
  // The second job reads its delivery (the subscription is active), then waits for the slot.
  const secondDone = run(second.id);
  await secondPassedItsCheck;
  const patched = await stack.api('PATCH', `/v1/admin/webhooks/${hook.body.id}`, { active: false });
  t.is(patched.body.active, false);
  receiver.release();
  await Promise.all([firstDone, secondDone]);

  t.deepEqual(outcomes, { [first.id]: ['ack'], [second.id]: ['ack'] });
  t.is(receiver.requests.length, 1, 'nothing was sent after the deactivation');
  const done = (await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${first.id}`)).body;
  t.like(done, { status: 'delivered', attempt_count: 1 });
  const abandoned = (await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${second.id}`)).body;
  t.like(abandoned, { status: 'failed', attempt_count: 0, last_error: 'webhook is inactive', next_attempt_at: null });
  t.deepEqual(abandoned.attempts, []);
});
