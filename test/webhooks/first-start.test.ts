import test from 'ava';
import { startReceiver, startStack, waitFor, type Receiver, type Stack } from './helpers.js';

// Events committed before the delivery worker ever started (deployed after llm-api, or its first
// start failed) are kept for it: llm-api declares the worker's durable queues and the fan-out
// binding when it starts, so the relay never publishes them into an exchange nothing is bound to.
const stacks: Stack[] = [];
let receiver: Receiver;

test.before(async () => {
  receiver = await startReceiver();
});
test.after.always(async () => {
  for (const stack of stacks) await stack.close();
  await receiver?.close();
});

for (const bus of ['pg', 'amqp'] as const) {
  test.serial(`${bus}: an event published before the worker's first start is delivered once it starts`, async (t) => {
    // A fresh platform (own schema, exchange and queues) whose worker has never run.
    const stack = await startStack({ bus, worker: false });
    stacks.push(stack);
    const hook = await stack.api('POST', '/v1/admin/webhooks', { url: receiver.url(`/${bus}`), events: ['*'] });
    const early = await stack.emit('conversation.created', { conversation_id: `conv_before_${bus}` });
    // The relay has published it (and marked it so) while no worker existed.
    const knex = stack.svc.runtime.db.knex;
    await waitFor(async () => (await knex('outbox_events').where({ id: early }).first())?.published_at, 30_000, 'the event published');
    await stack.startWorker();
    const late = await stack.emit('conversation.created', { conversation_id: `conv_after_${bus}` });
    const got = await receiver.until(() => [early, late].every((id) => receiver.for(hook.body.id).some((r) => r.headers['x-event-id'] === id)), 30_000, 'both events delivered');
    t.deepEqual(
      got.filter((r) => r.headers['x-webhook-id'] === hook.body.id).map((r) => r.json.data.conversation_id).sort(),
      [`conv_after_${bus}`, `conv_before_${bus}`],
    );
  });
}
