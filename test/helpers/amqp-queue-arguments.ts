import amqp from 'amqplib';
import { TEST_AMQP_URL } from './servers.js';

/**
 * Whether the existing durable queue `queue` was declared with exactly `args` (its x-arguments).
 * RabbitMQ lists arguments only through rabbitmqctl or the management plugin; instead this declares
 * the queue again with `args`: the broker accepts an equivalent declaration and refuses one whose
 * arguments differ (406 PRECONDITION_FAILED, "inequivalent arg"). A missing queue is `false` (a
 * passive check first, so nothing is created).
 */
export async function queueDeclaredWith(queue: string, args: Record<string, unknown>): Promise<boolean> {
  const connection = await amqp.connect(TEST_AMQP_URL);
  try {
    // A refused declaration closes the channel that made it (and amqplib emits the broker's
    // reason as an 'error' event, thrown when nothing listens): one channel per step.
    const channel = async () => {
      const ch = await connection.createChannel();
      const closedBy: { code?: number } = {};
      ch.on('error', (error: { code?: number }) => (closedBy.code = error.code));
      return { ch, closedBy };
    };
    const check = await channel();
    const exists = await check.ch.checkQueue(queue).then(() => true, () => false);
    if (!exists) return false;
    await check.ch.close();
    const declare = await channel();
    try {
      await declare.ch.assertQueue(queue, { durable: true, arguments: args });
    } catch (error) {
      if (declare.closedBy.code === 406 || (error as { code?: number }).code === 406) return false;
      throw error;
    }
    await declare.ch.close();
    return true;
  } finally {
    await connection.close().catch(() => {});
  }
}
