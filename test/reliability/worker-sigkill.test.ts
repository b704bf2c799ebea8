import { randomBytes } from 'node:crypto';
import test from 'ava';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { spawnWorker, startReceiver, startStack, waitFor } from '../webhooks/helpers.js';

// The webhook delivery worker runs in its own process and is SIGKILLed while deliveries are in
// flight (the receiver holds them open: received, not acked). A second worker process takes over:
// the jobs are redone, every event reaches the receiver, and the platform's side effect stays
// single: exactly one delivery record per event and subscription, recorded as delivered once
// (the receiver may see an in-flight event twice; it dedupes by X-Event-ID).
const MASTER_KEY = randomBytes(32).toString('hex');
const EVENTS = 30;
const figures = reliabilityFigures('worker-sigkill');
const row = figures.row('webhook worker SIGKILLed mid-job');
test.after.always(() => figures.write());

test('a delivery worker SIGKILLed mid-job: the jobs are redone by the next worker, one delivery record per event', async (t) => {
  let holding = true;
  const receiver = await startReceiver(() => (holding ? 'hang' : 200));
  const stack = await startStack({ worker: false, env: { MASTER_KEY, WEBHOOK_TIMEOUT_MS: '2000' } });
  const workers: Array<ReturnType<typeof spawnWorker>> = [];
  t.teardown(async () => {
    for (const w of workers) w.child.kill('SIGKILL');
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/sigkill'), events: ['conversation.created'] });
  t.is(created.status, 201);

  const first = spawnWorker(stack.svc.runtime.config, { MASTER_KEY, WEBHOOK_TIMEOUT_MS: '2000' });
  workers.push(first);
  await first.ready;
  const ids: string[] = [];
  for (let i = 0; i < EVENTS; i++) ids.push(await stack.emit('conversation.created', { conversation_id: `conv_${i}` }));

  await receiver.until((all) => all.length >= 3, 30_000, 'deliveries in flight');
  const inFlight = new Set(receiver.requests.map((r) => String(r.headers['x-event-id'])));
  first.child.kill('SIGKILL');
  row.faultsInjected++;
  await first.exited;
  holding = false;
  receiver.release();

  const second = spawnWorker(stack.svc.runtime.config, { MASTER_KEY, WEBHOOK_TIMEOUT_MS: '2000' });
  workers.push(second);
  await second.ready;
  await receiver.until(() => receiver.eventIds().size === EVENTS, 60_000, 'every event delivered');
  const rows = await waitFor(async () => {
    const r = await stack.svc.runtime.db.knex('webhook_deliveries').where({ webhook_id: created.body.id }).select('event_id', 'status', 'attempts');
    return r.length === EVENTS && r.every((x) => x.status === 'delivered') ? r : undefined;
  }, 60_000, 'every delivery recorded as delivered');

  const lost = ids.filter((id) => !receiver.eventIds().has(id)).length;
  const recordsPerEvent = new Map<string, number>();
  for (const r of rows) recordsPerEvent.set(r.event_id, (recordsPerEvent.get(r.event_id) ?? 0) + 1);
  row.eventsChecked += EVENTS;
  row.itemsLost += lost;
  t.is(lost, 0);
  t.deepEqual([...recordsPerEvent.values()].filter((n) => n !== 1), [], 'one delivery record per event');
  t.deepEqual([...recordsPerEvent.keys()].sort(), [...ids].sort());
  // The deliveries in flight at the kill were redone (at-least-once at the receiver).
  for (const id of inFlight) t.true(receiver.requests.filter((r) => r.headers['x-event-id'] === id).length >= 2);
  row.faultsSurvived++;
  t.log(`${inFlight.size} in flight at the kill; ${receiver.requests.length} requests for ${EVENTS} events`);
});
