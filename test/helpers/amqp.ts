import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import amqp, { type ChannelModel } from 'amqplib';
import { busExchangeName } from '../../services/kit/bus/types.js';
import { TEST_AMQP_URL } from './servers.js';

const run = promisify(execFile);

/**
 * Deletes every queue whose name starts with `prefix` and the bus's exchange (`exchange` under that
 * prefix, the one exchange a bus declares); tests leave no durable garbage behind. Queues are listed
 * with one `rabbitmqctl` call, which boots an Erlang VM (~0.4 s and as much CPU): the exchange is
 * named, not listed, so each cleanup pays that once.
 */
export async function deleteAmqpTopology(prefix: string, exchange: string): Promise<void> {
  let names: string[];
  try {
    const { stdout } = await run('rabbitmqctl', ['list_queues', '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
    names = stdout.split('\n').map((s) => s.trim()).filter((n) => prefix && n.startsWith(prefix));
  } catch {
    return; // best effort: cleanup must never fail a test
  }
  const connection = await amqp.connect(TEST_AMQP_URL).catch(() => undefined);
  if (!connection) return;
  try {
    const channel = await connection.createChannel();
    for (const name of names) await channel.deleteQueue(name).catch(() => {});
    await channel.deleteExchange(busExchangeName(prefix, exchange)).catch(() => {});
    await channel.close().catch(() => {});
  } finally {
    await connection.close().catch(() => {});
  }
}

/** Messages waiting in a queue (e.g. a dead-letter queue). */
export async function queueDepth(queue: string): Promise<number> {
  const connection = await amqp.connect(TEST_AMQP_URL);
  try {
    const channel = await connection.createChannel();
    const reply = await channel.checkQueue(queue).catch(() => ({ messageCount: 0 }));
    return reply.messageCount;
  } finally {
    await connection.close().catch(() => {});
  }
}

/**
 * Consumers on a queue, over an open connection; 0 while the queue does not exist yet (a missing
 * queue closes the channel that asked, so each check has a channel of its own).
 */
export async function queueConsumers(connection: ChannelModel, queue: string): Promise<number> {
  const channel = await connection.createChannel();
  channel.on('error', () => {});
  try {
    return (await channel.checkQueue(queue)).consumerCount;
  } catch {
    return 0;
  } finally {
    await channel.close().catch(() => {});
  }
}
