import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import amqp, { type ChannelModel } from 'amqplib';
import { busExchangeName } from '../../services/kit/bus/types.js';
import { TEST_AMQP_URL } from './servers.js';

const run = promisify(execFile);

/**
 * Set by `npm test` (scripts/test.mjs): the file where cleanups record their queue prefixes, so
 * that the queues of the whole run are listed once, when it ends (`sweepRecordedQueues`).
 */
const QUEUE_LEDGER = process.env.TEST_AMQP_QUEUE_LEDGER;

/**
 * Deletes the bus's exchange (`exchange` under `prefix`, the one exchange a bus declares) and every
 * queue whose name starts with `prefix`; tests leave no durable garbage behind. Queues can only be
 * listed with `rabbitmqctl`, which boots an Erlang VM (~0.4 s and ~0.55 s of CPU): under `npm test`
 * the prefix is recorded instead and the run lists its queues once at the end; alone (ava run
 * directly), the queues are listed and deleted now.
 */
export async function deleteAmqpTopology(prefix: string, exchange: string): Promise<void> {
  if (QUEUE_LEDGER && prefix) appendFileSync(QUEUE_LEDGER, `${prefix}\n`);
  const names = QUEUE_LEDGER ? [] : await queuesStartingWith([prefix]);
  await deleteTopology(names, [busExchangeName(prefix, exchange)]);
}

/** `npm test`'s last step: deletes the queues of every prefix the run's cleanups recorded. */
export async function sweepRecordedQueues(ledger: string): Promise<{ prefixes: number; queues: number }> {
  const prefixes = existsSync(ledger) ? readFileSync(ledger, 'utf8').split('\n').filter(Boolean) : [];
  const names = await queuesStartingWith(prefixes);
  await deleteTopology(names, []);
  return { prefixes: prefixes.length, queues: names.length };
}

/** Queues on the test broker whose names start with one of `prefixes` (`rabbitmqctl`: ~0.4 s). */
export async function queuesStartingWith(prefixes: string[]): Promise<string[]> {
  const wanted = prefixes.filter(Boolean);
  if (wanted.length === 0) return [];
  try {
    const { stdout } = await run('rabbitmqctl', ['list_queues', '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
    return stdout
      .split('\n')
      .map((s) => s.trim())
      .filter((n) => wanted.some((prefix) => n.startsWith(prefix)));
  } catch {
    return []; // best effort: cleanup must never fail a test
  }
}

async function deleteTopology(queues: string[], exchanges: string[]): Promise<void> {
  if (queues.length + exchanges.length === 0) return;
  const connection = await amqp.connect(TEST_AMQP_URL).catch(() => undefined);
  if (!connection) return;
  try {
    const channel = await connection.createChannel();
    for (const name of queues) await channel.deleteQueue(name).catch(() => {});
    for (const name of exchanges) await channel.deleteExchange(name).catch(() => {});
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
