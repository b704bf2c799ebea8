import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import { TEST_AMQP_URL } from './servers.js';

const run = promisify(execFile);

/** Deletes every queue whose name starts with `prefix`, and the exchange; tests leave no durable garbage behind. */
export async function deleteAmqpTopology(prefix: string, exchange?: string): Promise<void> {
  let names: string[] = [];
  try {
    const { stdout } = await run('rabbitmqctl', ['list_queues', '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
    names = stdout.split('\n').map((s) => s.trim()).filter((n) => n.startsWith(prefix));
  } catch {
    return; // best effort: cleanup must never fail a test
  }
  const connection = await amqp.connect(TEST_AMQP_URL).catch(() => undefined);
  if (!connection) return;
  try {
    const channel = await connection.createChannel();
    for (const name of names) await channel.deleteQueue(name).catch(() => {});
    if (exchange) await channel.deleteExchange(exchange).catch(() => {});
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
