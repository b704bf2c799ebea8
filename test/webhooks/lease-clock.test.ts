import test from 'ava';
import type { DeliveryJob } from '../../domains/webhooks/index.js';
import { ManualClock, type BusMessage, type Delivery } from '../../services/kit/index.js';
import { directDeliveryHandler, receiverAndStack, type Receiver, type Stack } from './helpers.js';

// An attempt's lease is set and judged by the database's clock: workers whose own clocks disagree
// by an hour neither take a lease another one holds nor hand out one that is already over. Each
// handler stands for one worker (its own clock, its own slots); no worker runs.
let stack: Stack;
let receiver: Receiver;

receiverAndStack(test, { respond: (_r, index) => (index === 0 ? 'hang' : 200), stack: { bus: 'pg', worker: false } }, (r, s) => {
  receiver = r;
  stack = s;
});

const HOUR = 3600 * 1000;

test('a lease taken by a worker whose clock is an hour behind holds against workers on time or an hour ahead', async (t) => {
  const worker = (skewMs: number) => directDeliveryHandler(stack, { clock: new ManualClock(Date.now() + skewMs), timeoutMs: 20_000 }).handle;
  const behind = worker(-HOUR);
  const onTime = worker(0);
  const ahead = worker(HOUR);
  const run = async (handle: ReturnType<typeof worker>, id: string) => {
    let settled = '';
    const delivery: Delivery = {
      ack: async () => void (settled = 'ack'),
      retryAfter: async () => void (settled = 'retry'),
      deadLetter: async () => void (settled = 'dead'),
    };
    const message: BusMessage<DeliveryJob> = { id, routingKey: 'x', body: { delivery_id: id }, headers: { 'x-webhook-attempt': '0' }, redelivered: true };
    await handle(message, delivery);
    return settled;
  };

  const hook = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/lease'), events: ['*'] })).body.id as string;
  const id = (await stack.api('POST', `/v1/admin/webhooks/${hook}/test`)).body.id as string;
  // The worker behind makes the attempt, which hangs at the receiver: its lease is held.
  const first = run(behind, id);
  await receiver.until((all) => all.length === 1, 30_000, 'the first attempt in flight');
  // Copies of the same job (redelivered) at the other workers find the lease held: looked at again later, no second attempt.
  t.is(await run(onTime, id), 'retry');
  t.is(await run(ahead, id), 'retry');
  t.is(receiver.requests.length, 1, 'a second attempt was made while the first was in flight');
  receiver.release();
  t.is(await first, 'ack');
  t.like((await stack.api('GET', `/v1/admin/webhooks/${hook}/deliveries/${id}`)).body, { status: 'delivered', attempt_count: 1 });
});
