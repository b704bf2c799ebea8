import test from 'ava';
import { ManualClock } from '../../services/kit/index.js';
import { verifyWebhookSignature } from '../../services/kit/webhook-signature.js';
import { startReceiver, startStack, waitFor } from './helpers.js';

// X-Timestamp and X-Signature are made for each attempt from the worker's clock: a retry three
// hours after the event still passes the receiver's 300 s replay check. Time is a ManualClock
// moved by the receiver itself between the attempts (no waiting on wall time).
test('a retry hours later carries a fresh timestamp and signature that pass the replay check', async (t) => {
  const clock = new ManualClock(Date.parse('2026-11-22T03:00:00Z'));
  const secret = 'clock-secret-0123456789abcdef';
  const seenAt: number[] = [];
  const receiver = await startReceiver((_r, i) => {
    seenAt.push(clock.now());
    if (i === 0) {
      clock.advance(3 * 3600 * 1000); // the next attempt happens three hours later
      return 503;
    }
    return 200;
  });
  const stack = await startStack({ clock, env: { WEBHOOK_RETRY_SCHEDULE: '20ms,20ms,20ms,20ms,20ms,20ms,20ms' } });
  t.teardown(async () => {
    await stack.close();
    await receiver.close();
  });
  const created = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url('/clock'), events: ['model.updated'], secret });
  await stack.emit('model.updated', { model_id: 'm', changes: {}, updated_at: new Date().toISOString() });
  const [first, second] = await receiver.until((all) => all.length >= 2, 30_000, 'two attempts');
  const ts = (r: typeof first) => Number(r!.headers['x-timestamp']);
  t.is(ts(second) - ts(first), 3 * 3600);
  t.is(ts(first), Math.floor(seenAt[0]! / 1000));
  t.is(first!.json.id, second!.json.id);
  t.is(first!.json.timestamp, second!.json.timestamp); // the event's time does not change
  const check = (r: typeof first, now: number) =>
    verifyWebhookSignature({ body: r!.body, signature: String(r!.headers['x-signature']), timestamp: String(r!.headers['x-timestamp']), secret, now });
  // Each attempt passes at the time it was made; the first one replayed three hours later is refused.
  t.deepEqual(check(first, seenAt[0]!), { ok: true });
  t.deepEqual(check(second, seenAt[1]!), { ok: true });
  t.deepEqual(check(first, seenAt[1]!), { ok: false, reason: 'timestamp_too_old' });
  const d = await waitFor(async () => {
    const r = await stack.api('GET', `/v1/admin/webhooks/${created.body.id}/deliveries`);
    return r.body.data[0]?.status === 'delivered' ? r.body.data[0] : undefined;
  });
  t.is(d.attempts.length, 2);
});
