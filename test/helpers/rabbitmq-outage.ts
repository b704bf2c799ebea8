import type { ExecutionContext } from 'ava';
import { randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from './platform.js';
import type { FigureRow } from './reliability-figures.js';
import { waitFor } from './wait.js';
import { startReceiver, type Receiver } from '../webhooks/helpers.js';

/**
 * The RabbitMQ outage scenario, shared by the suite that cuts the broker behind a fault proxy and
 * the one that stops a real node and starts it again: users create conversations through the edge
 * while a webhook subscriber receives every `conversation.created`, and the broker goes away
 * half-way through the burst. The API keeps accepting writes (events wait in the outbox, committed
 * with the change), the bus reconnects by itself, consumers resume, and every committed event
 * reaches the receiver.
 */
export interface BrokerOutage {
  /** The AMQP_URL the platform uses. */
  url: string;
  /** Takes the broker away (connections dropped, new ones refused). */
  fail(): Promise<void> | void;
  /** Brings it back at the same address. */
  restore(): Promise<void> | void;
  close(): Promise<void>;
}

const CONVERSATIONS = 150;
const WORKERS = 4;

export async function burstScenario(t: ExecutionContext, row: FigureRow, outage: BrokerOutage, label: string): Promise<void> {
  const adminKey = `sk_${randomBase62(32)}`;
  let receiver: Receiver | undefined;
  let p: TestPlatform | undefined;
  t.teardown(async () => {
    await p?.stop();
    await receiver?.close();
    await outage.close();
  });
  receiver = await startReceiver();
  p = await startTestPlatform({
    env: {
      AMQP_URL: outage.url,
      BOOTSTRAP_ADMIN_API_KEY: adminKey,
      EGRESS_ALLOW_HOSTS: '127.0.0.1',
      WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '16',
      WEBHOOK_RETRY_SCHEDULE: '50ms,100ms,200ms,400ms,800ms,1s,2s',
    },
  });
  const platform = p;
  const subscribed = await fetch(`${p.url}/v1/admin/webhooks`, {
    method: 'POST',
    headers: { 'x-api-key': adminKey, 'content-type': 'application/json' },
    body: JSON.stringify({ url: receiver.url(`/${label}`), events: ['conversation.created'] }),
  });
  t.is(subscribed.status, 201);
  const token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;

  const statuses: number[] = [];
  const created: string[] = [];
  let next = 0;
  let duringOutage = 0;
  let away = false;
  const burst = Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (next < CONVERSATIONS) {
        const n = next++;
        // The second half of the burst waits for the outage (so writes happen while the broker is
        // away, however long stopping it takes).
        if (n >= CONVERSATIONS / 2) await waitFor(() => away, 60_000, 'broker away');
        const res = await fetch(`${platform.url}/v1/conversations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ metadata: { n: String(n) } }),
        });
        statuses.push(res.status);
        if (res.status === 200 || res.status === 201) {
          created.push(((await res.json()) as { id: string }).id);
          if (away) duringOutage++;
        }
      }
    }),
  );

  await receiver.until(() => receiver!.requests.length >= 20, 60_000, 'first deliveries');
  await outage.fail();
  row.faultsInjected++;
  await waitFor(async () => platform.runtime.bus.ping().then(() => false, () => true), 30_000, 'the bus notices the broker is gone');
  away = true;
  await waitFor(() => duringOutage >= 10, 30_000, 'writes accepted while the broker is away');
  const deliveredAtRestore = receiver.eventIds().size;
  await outage.restore();
  await burst;

  const conversationOf = (body: any) => body?.data?.conversation_id as string | undefined;
  await receiver.until(() => new Set(receiver!.requests.map((r) => conversationOf(r.json))).size >= created.length, 120_000, 'every event delivered after the broker is back');

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
  t.true(deliveredAtRestore < CONVERSATIONS, 'the outage happened mid-burst');
  row.faultsSurvived++;
  t.log(`${CONVERSATIONS} conversations (${duringOutage} during the outage), ${deliveredAtRestore} events delivered before the broker came back, ${receiver.requests.length} deliveries`);
}
