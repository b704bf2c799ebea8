import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import amqp, { type ChannelModel } from 'amqplib';
import { TEST_AMQP_URL } from './servers.js';

const run = promisify(execFile);

/**
 * Deletes every queue and exchange whose name starts with `prefix` (the bus derives its exchange
 * from the prefix), and `exchange` if given; tests leave no durable garbage behind.
 */
export async function deleteAmqpTopology(prefix: string, exchange?: string): Promise<void> {
  let names: string[] = [];
  let exchanges: string[] = [];
  const list = async (what: string) => {
    const { stdout } = await run('rabbitmqctl', [what, '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
    return stdout.split('\n').map((s) => s.trim()).filter((n) => prefix && n.startsWith(prefix));
  };
  try {
    names = await list('list_queues');
    exchanges = await list('list_exchanges');
  } catch {
    return; // best effort: cleanup must never fail a test
  }
  if (exchange) exchanges.push(exchange);
  const connection = await amqp.connect(TEST_AMQP_URL).catch(() => undefined);
  if (!connection) return;
  try {
    const channel = await connection.createChannel();
    for (const name of names) await channel.deleteQueue(name).catch(() => {});
    for (const name of new Set(exchanges)) await channel.deleteExchange(name).catch(() => {});
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
