import test from 'ava';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { startReceiver, startStack, waitFor, type Receiver, type Stack } from './helpers.js';

/**
 * Retry behaviour, registered for one bus driver: RabbitMQ (TTL queue per delay step) or the
 * PostgreSQL queue (run_at). The schedule is compressed to milliseconds; the order and the
 * recorded next-attempt times are checked, never wall-clock durations.
 */
export const SCHEDULE = [30, 60, 90, 120, 150, 180, 210];

export function retryContract(bus: 'amqp' | 'pg') {
  let stack: Stack;
  let receiver: Receiver;
  // Per path: the statuses to answer, in order (then 200).
  const plans = new Map<string, (number | 'hang')[]>();

  test.before(async () => {
    receiver = await startReceiver((r) => {
      const path = r.path.split('?')[0]!;
      const plan = plans.get(path);
      const next = plan?.shift();
      if (next === 'hang') return 'hang';
      if (next === 302) return { status: 302, headers: { location: receiver.url('/elsewhere') } };
      return next ?? 200;
    });
    stack = await startStack({
      bus,
      env: {
        WEBHOOK_RETRY_SCHEDULE: SCHEDULE.map((ms) => `${ms}ms`).join(','),
        WEBHOOK_TIMEOUT_MS: '1500',
        WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION: '2',
        WEBHOOK_BUSY_DELAY_MS: '50',
      },
    });
  });
  test.after.always(async () => {
    receiver?.release();
    await stack?.close();
    await receiver?.close();
  });

  async function subscribe(path: string, events = ['message.sent']): Promise<string> {
    const r = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url(path), events, secret: 'retry-secret-0123456789' });
    if (r.status !== 201) throw new Error(JSON.stringify(r.body));
    return r.body.id;
  }
  const deliveriesOf = async (webhookId: string) => (await stack.api('GET', `/v1/admin/webhooks/${webhookId}/deliveries`)).body.data as any[];
  const settled = (webhookId: string, status: string) =>
    waitFor(async () => {
      const [d] = await deliveriesOf(webhookId);
      return d && d.status === status ? d : undefined;
    }, 30_000, `delivery ${status}`);

  test.serial('5xx is retried on the schedule, in order, with a fresh signature each time, and stops at the first 2xx', async (t) => {
    plans.set('/flaky', [500, 503, 500]);
    const id = await subscribe('/flaky');
    const eventId = await stack.emit('message.sent', { message_id: 'msg_1' });
    const d = await settled(id, 'delivered');
    const got = receiver.for(id);
    t.is(got.length, 4);
    t.deepEqual(got.map((r) => r.json.retry_count), [0, 1, 2, 3]);
    t.true(got.every((r) => r.headers['x-event-id'] === eventId && r.json.id === eventId));
    for (const r of got) {
      t.true(verifyWebhookSignature({ body: r.body, signature: String(r.headers['x-signature']), timestamp: String(r.headers['x-timestamp']), secret: 'retry-secret-0123456789' }).ok);
    }
    t.deepEqual(d.attempts.map((a: any) => a.outcome), ['retry', 'retry', 'retry', 'delivered']);
    t.deepEqual(d.attempts.map((a: any) => a.status_code), [500, 503, 500, 200]);
    // The answer's times are Unix seconds (SPEC.md: every *_at of the LLM API), too coarse for a
    // schedule in milliseconds: the recorded attempts give the milliseconds.
    t.true(d.attempts.every((a: any) => Number.isInteger(a.attempted_at) && (a.next_attempt_at === null || Number.isInteger(a.next_attempt_at))));
    const recorded = await stack.svc.runtime.db
      .knex('webhook_delivery_attempts')
      .where({ delivery_id: d.id })
      .orderBy('attempt')
      .select('attempted_at', 'next_attempt_at');
    t.deepEqual(
      recorded.slice(0, 3).map((a: any) => new Date(a.next_attempt_at).getTime() - new Date(a.attempted_at).getTime()),
      SCHEDULE.slice(0, 3),
    );
    t.is(d.attempts[3].next_attempt_at, null);
    t.is(d.attempts[0].attempted_at, Math.floor(new Date(recorded[0].attempted_at).getTime() / 1000));
    t.is(d.attempt_count, 4);
  });

  test.serial('a 4xx is not retried; a 3xx is a failure and the redirect is not followed', async (t) => {
    plans.set('/gone', [410]);
    plans.set('/moved', [302]);
    const gone = await subscribe('/gone', ['model.added']);
    const moved = await subscribe('/moved', ['model.added']);
    await stack.emit('model.added', { model_id: 'x' });
    const g = await settled(gone, 'failed');
    const m = await settled(moved, 'failed');
    t.is(g.attempt_count, 1);
    t.like(g.attempts[0], { outcome: 'failed', status_code: 410, next_attempt_at: null });
    t.is(m.attempt_count, 1);
    t.like(m.attempts[0], { outcome: 'failed', status_code: 302 });
    t.regex(m.last_error, /redirect/);
    // A later event to the same subscriptions (answered 200) arrives, and the failed one never came again.
    const marker = await stack.emit('model.added', { model_id: 'y' });
    await receiver.until(() => receiver.for(gone).some((r) => r.headers['x-event-id'] === marker) && receiver.for(moved).some((r) => r.headers['x-event-id'] === marker));
    t.is(receiver.for(gone).length, 2);
    t.is(receiver.for(moved).length, 2);
    t.false(receiver.requests.some((r) => r.path === '/elsewhere'));
  });

  test.serial('the 8th failure marks the delivery dead; redeliver sends it again', async (t) => {
    plans.set('/down', Array(8).fill(500));
    const id = await subscribe('/down', ['conversation.deleted']);
    const eventId = await stack.emit('conversation.deleted', { conversation_id: 'conv_1' });
    const d = await settled(id, 'dead');
    t.is(d.attempt_count, 8);
    t.is(receiver.for(id).length, 8);
    t.deepEqual(d.attempts.map((a: any) => a.outcome), [...Array(7).fill('retry'), 'dead']);
    t.deepEqual(receiver.for(id).map((r) => r.json.retry_count), [0, 1, 2, 3, 4, 5, 6, 7]);
    t.is(d.next_attempt_at, null);

    // Dead deliveries are listed by status and can be sent again (the receiver now answers 200).
    const dead = await stack.api('GET', `/v1/admin/webhooks/${id}/deliveries?status=dead`);
    t.is(dead.body.data.length, 1);
    const again = await stack.api('POST', `/v1/admin/webhooks/${id}/deliveries/${d.id}/redeliver`);
    t.is(again.status, 202);
    t.is(again.body.status, 'pending');
    const done = await settled(id, 'delivered');
    t.is(done.attempt_count, 9);
    const last = receiver.for(id).at(-1)!;
    t.is(last.headers['x-event-id'], eventId);
    t.is(last.json.retry_count, 8);
    // A delivered one may be sent again (a pending one is refused: see the slow-receiver test).
    const twice = await stack.api('POST', `/v1/admin/webhooks/${id}/deliveries/${d.id}/redeliver`);
    t.is(twice.status, 202);
    await waitFor(async () => receiver.for(id).length === 10);
    const missing = await stack.api('POST', `/v1/admin/webhooks/${id}/deliveries/whd_nope/redeliver`);
    t.is(missing.status, 404);
  });

  test.serial('timeouts and connection errors are retried', async (t) => {
    plans.set('/slow', ['hang']);
    const slow = await subscribe('/slow', ['message.edited']);
    // A port with nothing listening: connection refused on every attempt.
    const closed = await startReceiver();
    const closedUrl = closed.url('/nobody');
    await closed.close();
    const refused = await stack.api('POST', '/v1/admin/webhooks', { url: closedUrl, events: ['message.edited'] });
    await stack.emit('message.edited', { message_id: 'msg_2' });
    const s = await settled(slow, 'delivered');
    t.is(s.attempt_count, 2);
    t.like(s.attempts[0], { outcome: 'retry', status_code: null });
    t.regex(s.attempts[0].error, /timed out/);
    const r = await settled(refused.body.id, 'dead');
    t.is(r.attempt_count, 8);
    t.regex(r.attempts[0].error, /ECONNREFUSED/);
    receiver.release();
  });

  test.serial('a slow receiver does not hold back deliveries to other subscriptions (bounded concurrency per subscription)', async (t) => {
    plans.set('/stuck', Array(10).fill('hang'));
    const stuck = await subscribe('/stuck', ['mcp_tool.enabled']);
    const fast = await subscribe('/fast', ['mcp_tool.enabled']);
    const events: string[] = [];
    for (let i = 0; i < 10; i++) events.push(await stack.emit('mcp_tool.enabled', { tool_id: `t${i}` }));
    await receiver.until(() => receiver.for(fast).length >= 10, 30_000, 'fast receiver got all events');
    t.deepEqual([...new Set(receiver.for(fast).map((r) => String(r.headers['x-event-id'])))].sort(), [...events].sort());
    // The stuck receiver holds at most the per-subscription limit of requests.
    t.true(receiver.hanging() <= 2, `hanging: ${receiver.hanging()}`);
    // A pending delivery cannot be redelivered: it is already scheduled.
    const pending = (await deliveriesOf(stuck)).find((d) => d.status === 'pending');
    t.truthy(pending);
    const refused = await stack.api('POST', `/v1/admin/webhooks/${stuck}/deliveries/${pending.id}/redeliver`);
    t.is(refused.status, 409);
    t.is(refused.body.error.param, 'delivery_id');
    receiver.release();
    plans.delete('/stuck');
    const caughtUp = await waitFor(async () => {
      const ds = await deliveriesOf(stuck);
      return ds.length === 10 && ds.every((d) => d.status === 'delivered') ? ds : undefined;
    }, 30_000, 'stuck subscription caught up');
    t.deepEqual(caughtUp.map((d: any) => d.event_id).sort(), [...events].sort());
  });
}
