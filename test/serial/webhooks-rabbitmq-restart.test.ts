import test from 'ava';
import { recordEvent } from '../../services/kit/index.js';
import { startPrivateRabbitMQ, type PrivateRabbitMQ } from '../helpers/private-servers.js';
import { startReceiver, startStack, waitFor } from '../webhooks/helpers.js';

// The webhook side of a RabbitMQ restart. test/reliability/rabbitmq-restart.test.ts restarts a
// node under writes through the edge and checks that writes keep succeeding and that every
// committed event arrives; this test keeps to what that one does not check: events committed
// straight into the outbox (transactions of several events each, the relay's batches), a
// subscriber of every type, and the delivery bookkeeping after the restart: the receiver sees
// exactly the committed events (nothing lost, nothing foreign) and every event ends as one delivery
// record in `delivered` (none left pending behind a job the node had not confirmed).
// The node is the test's own (startPrivateRabbitMQ): the shared broker serves other runs and is
// never stopped.
const EVENTS = 600;
const PER_TRANSACTION = 20;
let node: PrivateRabbitMQ;

test.before(async () => {
  node = await startPrivateRabbitMQ();
});
test.after.always(async () => {
  await node?.dispose();
});

test('RabbitMQ restarted during a burst: the receiver gets exactly the committed events and every delivery ends delivered, without intervention', async (t) => {
  const receiver = await startReceiver();
  const stack = await startStack({ env: { AMQP_URL: node.url, WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '32', WEBHOOK_RETRY_SCHEDULE: '50ms,100ms,200ms,400ms,800ms,1s,2s' } });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/restart'), events: ['*'] });
  t.is(created.status, 201);

  const ids: string[] = [];
  let away = false;
  let committedWhileAway = 0;
  const committing = (async () => {
    for (let i = 0; i < EVENTS; i += PER_TRANSACTION) {
      // The second half waits for the node to be down, however long stopping it takes, so part of
      // the burst is committed while the broker is away.
      if (i >= EVENTS / 2) await waitFor(() => away, 120_000, 'broker away');
      const batch = await stack.svc.runtime.db.knex.transaction(async (trx) => {
        const recorded: string[] = [];
        for (let j = i; j < Math.min(EVENTS, i + PER_TRANSACTION); j++) recorded.push(await recordEvent(trx, 'conversation.updated', { n: j }));
        return recorded;
      });
      ids.push(...batch);
      if (away) committedWhileAway += batch.length;
      stack.svc.runtime.relay.kick();
    }
  })();
  // Observed here too, so a failure before the final await is reported once, by the test.
  committing.catch(() => {});

  await receiver.until(() => receiver.eventIds().size >= 100, 60_000, 'first deliveries');
  await node.stop('SIGTERM');
  await waitFor(async () => stack.svc.runtime.bus.ping().then(() => false, () => true), 30_000, 'bus notices the broker is gone');
  away = true;
  await waitFor(() => committedWhileAway >= 5 * PER_TRANSACTION, 60_000, 'events committed while the broker is away');
  const atRestart = receiver.eventIds().size;
  await node.start();
  await committing;

  await receiver.until(() => receiver.eventIds().size >= ids.length, 120_000, 'all events delivered after the restart');
  t.true(atRestart < EVENTS, 'the restart happened mid-burst');
  t.is(ids.length, EVENTS);
  t.deepEqual([...receiver.eventIds()].sort(), [...ids].sort());
  const byStatus = async () => {
    const rows: Array<{ status: string; n: string | number }> = await stack.svc.runtime.db.knex('webhook_deliveries').select('status').count({ n: '*' }).groupBy('status');
    return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
  };
  // Bounded wait for the last outcomes to be recorded; on timeout the assertion below shows what is left.
  const statuses = await waitFor(async () => {
    const now = await byStatus();
    return Object.keys(now).length === 1 && now.delivered === EVENTS ? now : undefined;
  }, 60_000, 'every delivery recorded as delivered').catch(byStatus);
  t.deepEqual(statuses, { delivered: EVENTS });
  t.log(`${atRestart} events delivered before the node came back, ${committedWhileAway} committed while it was away; ${receiver.requests.length} requests for ${EVENTS} events`);
});
