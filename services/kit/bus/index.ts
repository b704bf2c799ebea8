import type { Knex } from 'knex';
import type { Clock } from '../clock.js';
import type { Logger } from '../logger.js';
import { createAmqpBus } from './amqp.js';
import { PgQueueBus } from './pg-queue.js';
import type { Bus } from './types.js';

export * from './types.js';
export { BusUnavailableError } from './amqp.js';
export { PgQueueBus } from './pg-queue.js';

/** `AMQP_URL` set → RabbitMQ; unset → the PostgreSQL-backed queue in the platform database. */
export async function createBus(options: {
  amqpUrl?: string;
  exchange: string;
  queuePrefix?: string;
  prefetch?: number;
  pollMs?: number;
  /** The PostgreSQL-backed queue where it is its queues' only writer: see `PgQueueBus`. */
  idlePollMaxMs?: number;
  knex: Knex;
  clock: Clock;
  logger: Logger;
}): Promise<Bus> {
  if (options.amqpUrl) {
    return createAmqpBus({
      url: options.amqpUrl,
      exchange: options.exchange,
      queuePrefix: options.queuePrefix,
      prefetch: options.prefetch,
      logger: options.logger,
    });
  }
  return new PgQueueBus({
    knex: options.knex,
    exchange: options.exchange,
    queuePrefix: options.queuePrefix,
    prefetch: options.prefetch,
    pollMs: options.pollMs,
    idlePollMaxMs: options.idlePollMaxMs,
    clock: options.clock,
    logger: options.logger,
  });
}
