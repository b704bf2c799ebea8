import test from 'ava';
import { randomBase62 } from '../../services/kit/index.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_AMQP_URL } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';
import { startReceiver, type Receiver } from '../webhooks/helpers.js';

// RabbitMQ's connections are cut (and new ones refused) while users create conversations through
// the edge and a webhook subscriber receives every `conversation.created`. The API keeps
// accepting writes during the outage (events wait in the outbox, committed with the change), the
// bus reconnects by itself, consumers resume, and every committed event reaches the receiver.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const CONVERSATIONS = 150;
const WORKERS = 4;
const figures = reliabilityFigures('rabbitmq-cut');
const row = figures.row('RabbitMQ connections cut during a burst');

let proxy: FaultProxy;
let receiver: Receiver;
let p: TestPlatform;

test.before(async () => {
  const target = new URL(TEST_AMQP_URL);
  proxy = await startFaultProxy({ host: target.hostname, port: Number(target.port || 5672) });
  const viaProxy = new URL(TEST_AMQP_URL);
  viaProxy.port = String(proxy.port);
  receiver = await startReceiver();
  p = await startTestPlatform({
    env: {
      AMQP_URL: viaProxy.toString(),
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      EGRESS_ALLOW_HOSTS: '127.0.0.1',
      WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '16',
      WEBHOOK_RETRY_SCHEDULE: '50ms,100ms,200ms,400ms,800ms,1s,2s',
    },
  });
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  await receiver?.close();
  await proxy?.close();
});

test('RabbitMQ cut during a burst: writes keep succeeding, the outbox keeps every event, deliveries resume, none lost', async (t) => {
  const subscribed = await fetch(`${p.url}/v1/admin/webhooks`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ url: receiver.url('/rabbit-cut'), events: ['conversation.created'] }),
  });
  t.is(subscribed.status, 201);
  const token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;

  const statuses: number[] = [];
  const created: string[] = [];
  let next = 0;
  let duringOutage = 0;
  let outage = false;
  const burst = Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (next < CONVERSATIONS) {
        const n = next++;
        // Half-way through the burst, wait for the cut (so writes happen while the broker is away).
        if (n === CONVERSATIONS / 2) await waitFor(() => outage, 60_000, 'broker cut');
        const res = await fetch(`${p.url}/v1/conversations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ metadata: { n: String(n) } }),
        });
        statuses.push(res.status);
        if (res.status === 200 || res.status === 201) {
          created.push(((await res.json()) as { id: string }).id);
          if (outage) duringOutage++;
        }
      }
    }),
  );

  await receiver.until(() => receiver.requests.length >= 20, 60_000, 'first deliveries');
  proxy.cut();
  row.faultsInjected++;
  await waitFor(async () => p.runtime.bus.ping().then(() => false, () => true), 30_000, 'the bus notices the broker is gone');
  outage = true;
  await waitFor(() => duringOutage >= 10, 30_000, 'writes accepted while the broker is away');
  const deliveredAtResume = receiver.eventIds().size;
  proxy.resume();
  await burst;

  const conversationOf = (body: any) => body?.data?.conversation_id as string | undefined;
  await receiver.until(() => new Set(receiver.requests.map((r) => conversationOf(r.json))).size >= created.length, 120_000, 'every event delivered after the broker is back');

  const outbox = await p.runtime.db.knex('outbox_events').where({ type: 'conversation.created' }).select('id');
  const delivered = receiver.eventIds();
  const lost = outbox.filter((e) => !delivered.has(e.id)).length;
  const deliveredConversations = new Set(receiver.requests.map((r) => conversationOf(r.json)));
  const lostConversations = created.filter((id) => !deliveredConversations.has(id)).length;

  row.requestsChecked += statuses.length;
  row.eventsChecked += outbox.length;
  row.fiveXx += statuses.filter((s) => s >= 500).length;
  row.itemsLost += lost + lostConversations;
  t.deepEqual(statuses.filter((s) => s !== 200 && s !== 201), []);
  t.is(created.length, CONVERSATIONS);
  t.is(outbox.length, CONVERSATIONS);
  t.is(lost, 0);
  t.is(lostConversations, 0);
  t.true(deliveredAtResume < CONVERSATIONS, 'the cut happened mid-burst');
  row.faultsSurvived++;
  t.log(`${CONVERSATIONS} conversations (${duringOutage} during the outage), ${deliveredAtResume} events delivered before the broker came back, ${receiver.requests.length} deliveries`);
});
