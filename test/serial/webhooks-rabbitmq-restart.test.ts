import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import test from 'ava';
import { recordEvent } from '../../services/kit/index.js';
import { startReceiver, startStack, waitFor } from '../webhooks/helpers.js';

// Serial, runs alone after the suite: RabbitMQ itself is stopped and started again in the middle
// of a burst. Durable queues, persistent messages, publisher confirms, manual ack and the outbox
// mean nothing is lost: distinct X-Event-IDs at the receiver = events committed.
// TEST_RABBITMQ_NODE selects the node rabbitmqctl drives (default: the local default node).
const run = promisify(execFile);
const node = process.env.TEST_RABBITMQ_NODE;
const ctl = (...args: string[]) => run('rabbitmqctl', [...(node ? ['-n', node] : []), ...args], { timeout: 120_000 });
const EVENTS = 600;

test('RabbitMQ restarts during a burst: every committed event reaches the receiver', async (t) => {
  const receiver = await startReceiver();
  const stack = await startStack({ env: { WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '32', WEBHOOK_RETRY_SCHEDULE: '50ms,100ms,200ms,400ms,800ms,1s,2s' } });
  let stopped = false;
  t.teardown(async () => {
    if (stopped) await ctl('start_app').catch(() => {});
    await ctl('await_startup').catch(() => {});
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/restart'), events: ['*'] });
  t.is(created.status, 201);

  const ids: string[] = [];
  const committing = (async () => {
    for (let i = 0; i < EVENTS; i += 20) {
      await stack.svc.runtime.db.knex.transaction(async (trx) => {
        for (let j = i; j < Math.min(EVENTS, i + 20); j++) ids.push(await recordEvent(trx, 'conversation.updated', { n: j }));
      });
      stack.svc.runtime.relay.kick();
    }
  })();

  await receiver.until(() => receiver.eventIds().size >= 100, 60_000, 'first deliveries');
  await ctl('stop_app');
  stopped = true;
  await waitFor(async () => stack.svc.runtime.bus.ping().then(() => false, () => true), 30_000, 'bus notices the broker is gone');
  const atStop = receiver.eventIds().size;
  await ctl('start_app');
  stopped = false;
  await ctl('await_startup');
  await committing;

  await receiver.until(() => receiver.eventIds().size >= ids.length, 120_000, 'all events delivered after the restart');
  t.true(atStop < EVENTS, 'the restart happened mid-burst');
  t.is(ids.length, EVENTS);
  t.deepEqual([...receiver.eventIds()].sort(), [...ids].sort());
  const delivered = await waitFor(async () => {
    const [{ n }] = await stack.svc.runtime.db.knex('webhook_deliveries').where({ status: 'delivered' }).count({ n: '*' });
    return Number(n) === EVENTS ? Number(n) : undefined;
  }, 60_000, 'all deliveries recorded as delivered');
  t.is(delivered, EVENTS);
  t.log(`${atStop} delivered before the stop; ${receiver.requests.length} requests for ${EVENTS} events`);
});
