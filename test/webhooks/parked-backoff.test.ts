import test from 'ava';
import type { DeliveryJob } from '../../domains/webhooks/index.js';
import type { BusMessage, Delivery } from '../../services/kit/index.js';
import { directDeliveryHandler, receiverAndStack, type Receiver, type Stack } from './helpers.js';

// A job of a subscription at its concurrency limit is parked on the bus. Each park in a row waits
// twice as long as the one before (from WEBHOOK_BUSY_DELAY_MS up to 32× it, at random the step or
// the one below it), the count carried in the job, so a long backlog behind one slow receiver is
// looked at less and less often. The handler is driven directly (no worker runs), with the random
// pick pinned, so each park's wait is known.
let stack: Stack;
let receiver: Receiver;
let busyHook = '';
const busyReplies: Array<'hang' | number> = ['hang', 503];

receiverAndStack(test, { respond: (r) => (r.headers['x-webhook-id'] === busyHook ? busyReplies.shift() ?? 200 : 200), stack: { bus: 'pg', worker: false } }, (r, s) => {
  receiver = r;
  stack = s;
});

const BUSY = 100;

test('a parked job waits longer each time it is parked (capped, jittered); jobs of other subscriptions are not held; an attempt starts the count again', async (t) => {
  let pick = 0;
  // The waiting job's read is announced (`readOf`): from there to its place in the waiting list the handler runs no I/O.
  const { handle, readOf, readsOf } = directDeliveryHandler(stack, { timeoutMs: 600_000, busyDelayMs: BUSY, random: () => pick });
  type Settled = { how: 'ack' | 'retry' | 'dead'; delayMs?: number; headers?: Record<string, string> };
  const run = async (id: string, headers: Record<string, string>): Promise<Settled> => {
    let settled: Settled | undefined;
    const delivery: Delivery = {
      ack: async () => void (settled = { how: 'ack' }),
      retryAfter: async (delayMs, extra) => void (settled = { how: 'retry', delayMs, headers: extra }),
      deadLetter: async () => void (settled = { how: 'dead' }),
    };
    const message: BusMessage<DeliveryJob> = { id, routingKey: 'x', body: { delivery_id: id }, headers, redelivered: false };
    await handle(message, delivery);
    return settled!;
  };
  const testEvent = async (hook: string) => (await stack.api('POST', `/v1/admin/webhooks/${hook}/test`)).body.id as string;

  busyHook = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/busy'), events: ['*'] })).body.id;
  const [inFlight, waiting, parked] = [await testEvent(busyHook), await testEvent(busyHook), await testEvent(busyHook)];
  const waitingReadDone = readOf(waiting);
  // The first job's attempt hangs and holds the subscription's only slot; the second waits in the
  // worker for it (the waiting list holds one); from then on the subscription's jobs are parked.
  const inFlightDone = run(inFlight, { 'x-webhook-attempt': '0' });
  await receiver.until((all) => all.length === 1, 30_000, 'the first attempt in flight');
  const waitingDone = run(waiting, { 'x-webhook-attempt': '0', 'x-webhook-parked': '4' });
  await waitingReadDone;
  // One turn of the event loop: the handler goes on (synchronously) into the waiting list.
  await new Promise<void>((resolve) => setImmediate(resolve));

  // A job from before the count existed (no header) is parked for WEBHOOK_BUSY_DELAY_MS, and counted;
  // a park names the job's subscription.
  const firstPark = { 'x-webhook-attempt': '0', 'x-webhook-parked': '1', 'x-webhook-parked-for': busyHook };
  t.deepEqual(await run(parked, { 'x-webhook-attempt': '0' }), { how: 'retry', delayMs: BUSY, headers: firstPark });
  t.deepEqual(await run(parked, { 'x-webhook-attempt': '0', 'x-webhook-parked': '0' }), { how: 'retry', delayMs: BUSY, headers: firstPark });
  // Jobs that did not name their subscription had to read their delivery to find it.
  t.is(readsOf(parked), 2);
  // The n-th park in a row waits BUSY × 2^(n-1), or at random half of it; never more than 32 × BUSY.
  // Back from a park, the job names its subscription: parked again without reading the database.
  const waits = (parkedBefore: string) => run(parked, { 'x-webhook-attempt': '0', 'x-webhook-parked': parkedBefore, 'x-webhook-parked-for': busyHook });
  const expected: Array<[string, number, number]> = [
    ['1', 1, 2],
    ['2', 2, 4],
    ['3', 4, 8],
    ['4', 8, 16],
    ['5', 16, 32],
    ['6', 16, 32],
    ['1000', 16, 32],
  ];
  for (const [before, low, high] of expected) {
    pick = 0.99;
    const up = await waits(before);
    pick = 0;
    const down = await waits(before);
    t.is(up.delayMs, high * BUSY, `park after ${before}`);
    t.is(down.delayMs, low * BUSY, `park after ${before}, jittered`);
    t.is(up.headers!['x-webhook-parked'], String(Number(before) + 1));
    t.is(up.headers!['x-webhook-parked-for'], busyHook);
  }
  t.is(readsOf(parked), 2, 'a job parked again read the database');
  // A malformed count is read as none.
  t.like(await waits('soon'), { delayMs: BUSY, headers: { 'x-webhook-parked': '1' } });
  // Parking wrote nothing: the delivery is pending with no attempt.
  t.like((await stack.api('GET', `/v1/admin/webhooks/${busyHook}/deliveries/${parked}`)).body, { status: 'pending', attempt_count: 0 });

  // Parking is per subscription: another subscription's job, even one parked many times before, is delivered at once.
  const other = (await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/other'), events: ['*'] })).body.id as string;
  t.deepEqual(await run(await testEvent(other), { 'x-webhook-attempt': '0', 'x-webhook-parked': '9' }), { how: 'ack' });

  // The hanging attempt ends; the waiting job (parked 4 times before it got in) makes its attempt,
  // answered 503: its retry carries the park count back at 0.
  receiver.release();
  t.deepEqual(await inFlightDone, { how: 'ack' });
  t.deepEqual(await waitingDone, { how: 'retry', delayMs: 1000, headers: { 'x-webhook-attempt': '1', 'x-webhook-parked': '0', 'x-webhook-parked-for': '' } });

  // Deactivated while the parked job waited on the bus: back with a free slot, it reads the
  // subscription as it is now and ends failed, without an attempt.
  const sent = receiver.requests.length;
  t.is((await stack.api('PATCH', `/v1/admin/webhooks/${busyHook}`, { active: false })).status, 200);
  t.deepEqual(await waits('3'), { how: 'ack' });
  t.is(readsOf(parked), 3);
  t.is(receiver.requests.length, sent);
  t.like((await stack.api('GET', `/v1/admin/webhooks/${busyHook}/deliveries/${parked}`)).body, { status: 'failed', attempt_count: 0, last_error: 'webhook is inactive' });
});
