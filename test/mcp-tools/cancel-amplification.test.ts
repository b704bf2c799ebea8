import test from 'ava';
import { ManualClock, type Bus } from '../../services/kit/index.js';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { RELAYED_CANCELS_PER_USER, RELAYED_CANCELS_WINDOW_MS } from '../../services/mcp-tools/tools/call-tool.js';
import { CALL_CANCELLED_EVENT } from '../../services/mcp-tools/tools/cancel-relay.js';
import { startTestService, type TestService } from '../helpers/env.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

// A cancel naming no call in this process is passed to the other replicas over the broker, and the
// server keeps no session to tell whether the id names anything. One POST with a batch of 100
// cancels for made-up ids made 100 publishes, each consumed by every replica: any client could
// make the service flood the bus. Now one user passes at most RELAYED_CANCELS_PER_USER per window
// on; other users keep their own budget, and the next window starts afresh. Real RabbitMQ; the
// service's bus is watched for what it publishes; the clock is manual.
let svc: TestService;
const clock = new ManualClock(1_800_000_000_000);
const published: Array<{ user_id: string; request_id: string | number }> = [];

test.before(async () => {
  svc = await startTestService(mcpToolsService, { bus: 'amqp', clock });
  const bus: Bus = svc.runtime.bus;
  const publish = bus.publish.bind(bus);
  bus.publish = ((topic: string, body: any, options?: any) => {
    if (topic === CALL_CANCELLED_EVENT) published.push({ user_id: body.user_id, request_id: body.request_id });
    return publish(topic, body, options);
  }) as Bus['publish'];
});
test.after.always(async () => {
  await svc?.close();
});

async function post(user: TestUser, body: unknown): Promise<number> {
  const res = await fetch(`${svc.url}/v1/mcp`, {
    method: 'POST',
    headers: { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

const cancels = (ids: number[]) => ids.map((requestId) => ({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } }));
const of = (user: TestUser) => published.filter((m) => m.user_id === user.id);

test.serial('a batch of 100 cancels for unknown ids makes at most RELAYED_CANCELS_PER_USER publishes; other users and the next window are not held back', async (t) => {
  const x = await createTestUser(svc.runtime.db.knex);
  const y = await createTestUser(svc.runtime.db.knex);
  t.is(await post(x, cancels(Array.from({ length: 100 }, (_, i) => 1000 + i))), 202);
  // Kept cancels go out in order: once Y's is published, every one of X's that was passed on is too.
  t.is(await post(y, cancels([1])), 202);
  await waitFor(() => of(y).length === 1, 10_000, "Y's cancel to be published");
  t.is(of(x).length, RELAYED_CANCELS_PER_USER);
  t.deepEqual(of(x).map((m) => m.request_id), Array.from({ length: RELAYED_CANCELS_PER_USER }, (_, i) => 1000 + i), 'the first ones, in order');

  // Still within the window: X's next cancel is dropped; in the next window it goes out.
  t.is(await post(x, cancels([7])), 202);
  clock.advance(RELAYED_CANCELS_WINDOW_MS);
  t.is(await post(x, cancels([8])), 202);
  await waitFor(() => of(x).length === RELAYED_CANCELS_PER_USER + 1, 10_000, "X's cancel in the next window");
  t.is(of(x).at(-1)!.request_id, 8);
  t.false(of(x).some((m) => m.request_id === 7));
});
