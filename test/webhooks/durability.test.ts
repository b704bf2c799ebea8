import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import test from 'ava';
import { recordEvent } from '../../services/kit/index.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { spawnWorker, startReceiver, startStack, waitFor, type Stack } from './helpers.js';

// Nothing is lost: a worker killed between receiving and acking, and a broker connection cut in
// the middle of a 1,000-event burst. Each time the receiver's distinct X-Event-IDs must equal
// the events committed (at-least-once; receivers dedupe by X-Event-ID).
const MASTER_KEY = randomBytes(32).toString('hex');

async function emitMany(stack: Stack, type: string, count: number, batch = 50): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += batch) {
    await stack.svc.runtime.db.knex.transaction(async (trx) => {
      for (let j = i; j < Math.min(count, i + batch); j++) ids.push(await recordEvent(trx, type, { n: j }));
    });
    stack.svc.runtime.relay.kick();
  }
  return ids;
}

test('a worker killed with SIGKILL between receiving and acking: every event is still delivered', async (t) => {
  // The receiver holds the first requests open (the worker is mid-delivery, nothing acked), then answers 200.
  let holding = true;
  const receiver = await startReceiver(() => (holding ? 'hang' : 200));
  const stack = await startStack({ worker: false, env: { MASTER_KEY, WEBHOOK_TIMEOUT_MS: '1500' } });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/kill'), events: ['conversation.*'] });
  t.is(created.status, 201);

  const worker = spawnWorker(stack.svc.runtime.config, { MASTER_KEY, WEBHOOK_TIMEOUT_MS: '1500' });
  t.teardown(() => void worker.child.kill('SIGKILL'));
  await worker.ready;
  const ids = await emitMany(stack, 'conversation.created', 20, 5);

  // Requests are in flight at the receiver: the worker has received jobs and not acked them.
  await receiver.until((all) => all.length >= 3, 30_000, 'deliveries in flight');
  const inFlight = new Set(receiver.requests.map((r) => String(r.headers['x-event-id'])));
  worker.child.kill('SIGKILL');
  await worker.exited;
  holding = false;
  receiver.release();

  // A new worker (in this process) gets the unacked messages again and finishes the job.
  await stack.startWorker();
  await receiver.until(() => receiver.eventIds().size === ids.length && [...inFlight].every((id) => receiver.requests.filter((r) => r.headers['x-event-id'] === id).length >= 2), 60_000, 'all events delivered');
  t.deepEqual([...receiver.eventIds()].sort(), [...ids].sort());
  // The ones in flight at the kill were sent again (at-least-once).
  for (const id of inFlight) t.true(receiver.requests.filter((r) => r.headers['x-event-id'] === id).length >= 2);
  const rows = await waitFor(async () => {
    const r = await stack.svc.runtime.db.knex('webhook_deliveries').select('status');
    return r.length === ids.length && r.every((x) => x.status === 'delivered') ? r : undefined;
  });
  t.is(rows.length, ids.length);
});

test('the broker connection is cut in the middle of a 1,000-event burst: every event is delivered', async (t) => {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
  const receiver = await startReceiver();
  const stack = await startStack({
    env: {
      MASTER_KEY,
      AMQP_URL: proxy.url('amqp', 'guest:guest'),
      WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '32',
      WEBHOOK_BUSY_DELAY_MS: '50',
      WEBHOOK_RETRY_SCHEDULE: '50ms,100ms,200ms,400ms,800ms,1s,2s',
    },
  });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
    await proxy.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/burst'), events: ['*'] });
  t.is(created.status, 201);

  const committed = emitMany(stack, 'message.sent', 1000);
  // Cut once deliveries are flowing, wait until the bus has noticed, then let it reconnect.
  await receiver.until(() => receiver.eventIds().size >= 150, 60_000, 'first deliveries');
  proxy.cut();
  await waitFor(async () => stack.svc.runtime.bus.ping().then(() => false, () => true), 15_000, 'bus notices the cut');
  const atCut = receiver.eventIds().size;
  proxy.resume();
  const ids = await committed;

  await receiver.until(() => receiver.eventIds().size >= ids.length, 80_000, 'all 1,000 events delivered');
  t.true(atCut < ids.length, 'the cut happened mid-burst');
  t.is(receiver.eventIds().size, ids.length);
  t.deepEqual([...receiver.eventIds()].sort(), [...ids].sort());
  const outbox = await stack.svc.runtime.db.knex('outbox_events').count({ n: '*' });
  t.is(Number(outbox[0]!.n), 1000);
  const delivered = await waitFor(async () => {
    const [{ n }] = await stack.svc.runtime.db.knex('webhook_deliveries').where({ status: 'delivered' }).count({ n: '*' });
    return Number(n) === 1000 ? Number(n) : undefined;
  });
  t.is(delivered, 1000);
  t.log(`distinct ${receiver.eventIds().size}, requests ${receiver.requests.length} (duplicates are allowed), ${atCut} before the cut`);
});

test('the sweep re-enqueues a pending delivery whose job was lost', async (t) => {
  const receiver = await startReceiver();
  const stack = await startStack({ env: { MASTER_KEY, WEBHOOK_SWEEP_INTERVAL_MS: '50', WEBHOOK_SWEEP_GRACE_MS: '0' } });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/swept'), events: ['*'] });
  // A delivery recorded by a fan-out that died before it could send the job (no message anywhere).
  await stack.svc.runtime.db.knex('webhook_deliveries').insert({
    id: 'whd_lostjob000000000000000000',
    webhook_id: created.body.id,
    event_id: 'evt_lostjob00000000000000000',
    event_type: 'model.updated',
    event_occurred_at: new Date(),
    event_data: JSON.stringify({ model_id: 'm' }),
    next_attempt_at: new Date(Date.now() - 1000),
  });
  const [got] = await receiver.until((all) => all.length >= 1, 15_000, 'swept delivery');
  t.is(got!.headers['x-event-id'], 'evt_lostjob00000000000000000');
  const row = await waitFor(async () => {
    const r = await stack.svc.runtime.db.knex('webhook_deliveries').where({ id: 'whd_lostjob000000000000000000' }).first();
    return r?.status === 'delivered' ? r : undefined;
  });
  t.is(row.attempts, 1);
});

test('a graceful stop lets an attempt in flight finish and be acked: no redelivery after restart', async (t) => {
  let hold = true;
  const receiver = await startReceiver(() => (hold ? 'hang' : 200));
  const stack = await startStack({ env: { MASTER_KEY } });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/graceful'), events: ['message.sent'] });
  const first = await stack.emit('message.sent', { n: 1 });
  await receiver.until((all) => all.length === 1, 15_000, 'attempt in flight');

  const stopping = stack.stopWorker();
  // Once the worker no longer consumes (its channel still open for the in-flight ack), answer.
  const { config } = stack.svc.runtime;
  const connection = await amqp.connect(config.AMQP_URL!);
  t.teardown(() => connection.close().catch(() => {}));
  const channel = await connection.createChannel();
  await waitFor(async () => (await channel.checkQueue(`${config.BUS_QUEUE_PREFIX}webhooks.deliveries`)).consumerCount === 0, 15_000, 'consumer cancelled');
  hold = false;
  receiver.release();
  await stopping;

  const row = await stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: created.body.id, event_id: first }).first();
  t.is(row.status, 'delivered');
  t.is(row.attempts, 1);
  // The job was acked before the channel closed: nothing went back to the queue.
  t.is((await channel.checkQueue(`${config.BUS_QUEUE_PREFIX}webhooks.deliveries`)).messageCount, 0);
  // Restart: the acked job does not come back; a later event does arrive.
  await stack.startWorker();
  const marker = await stack.emit('message.sent', { n: 2 });
  await receiver.until((all) => all.some((r) => r.headers['x-event-id'] === marker), 15_000, 'marker delivered');
  t.is(receiver.requests.filter((r) => r.headers['x-event-id'] === first).length, 1);
  t.is((await channel.checkQueue(`${config.BUS_QUEUE_PREFIX}webhooks.deliveries`)).messageCount, 0);
});
