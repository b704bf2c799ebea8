import test from 'ava';
import { inbox } from '../helpers/inbox.js';
import { openTestRuntime } from '../helpers/env.js';

// What the delivery worker relies on from the kit bus, on both drivers: a message handed out again
// by retryAfter is NOT flagged `redelivered` (only a consumer that died before settling makes it so).
for (const bus of ['amqp', 'pg'] as const) {
  test(`${bus}: a retried message is not flagged redelivered`, async (t) => {
    const runtime = await openTestRuntime({ bus });
    t.teardown(() => runtime.dispose());
    let first = true;
    const box = inbox((r) => {
      if (first) {
        first = false;
        return r.delivery.retryAfter(20, { 'x-step': '2' });
      }
      return r.delivery.ack();
    });
    await runtime.bus.consume({ queue: 'flag' }, box.handler);
    await runtime.bus.send('flag', { n: 1 }, { messageId: 'm1', headers: { 'x-step': '1' } });
    const a = await box.next();
    const b = await box.next();
    t.is(a.message.headers['x-step'], '1');
    t.is(b.message.headers['x-step'], '2');
    t.false(a.message.redelivered);
    t.false(b.message.redelivered);
  });
}
