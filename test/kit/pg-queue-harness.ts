import knexFactory from 'knex';
import {
  BusUnavailableError,
  ManualClock,
  PgQueueBus,
  createLogger,
  type Bus,
  type Database,
} from '../../services/kit/index.js';
import type { BusHarness } from './bus-contract.js';

/**
 * Harness for the PostgreSQL-backed queue. `faultyKnex` is a second connection to the same
 * database through a fault point (a TCP proxy for PostgreSQL); PGlite has no network, so there
 * the fault point is the bus's own availability flag.
 */
export function pgQueueHarness(db: Database, options: { exchange: string; faultyKnex?: () => knexFactory.Knex; onDown?: () => void; onUp?: () => void }) {
  const clock = new ManualClock(Date.now());
  const logger = createLogger({ level: 'silent', name: 'bus-pg-test' });
  const buses: Bus[] = [];
  let down = false;
  const make = (knex: knexFactory.Knex) => {
    const bus = new PgQueueBus({ knex, exchange: options.exchange, clock, logger, pollMs: 15 });
    buses.push(bus);
    return bus;
  };
  const harness: BusHarness = {
    openBus: async () => make(db.knex),
    async openFaultyBus() {
      if (options.faultyKnex) return make(options.faultyKnex());
      const inner = make(db.knex);
      // In-process driver with no network: unavailability is injected at the publish call.
      const guarded: Bus = Object.assign(Object.create(inner) as Bus, {
        publish: (key: string, body: unknown, opts: { messageId: string }) =>
          down ? Promise.reject(new BusUnavailableError()) : inner.publish(key, body, opts),
      });
      return guarded;
    },
    knex: db.knex,
    logger,
    async advance(ms) {
      clock.advance(ms);
    },
    pollsOf(bus, queue, n) {
      const emitter = bus as unknown as PgQueueBus;
      return new Promise((resolve) => {
        let seen = 0;
        const listener = (event: { queue: string }) => {
          if (!event.queue.endsWith(queue)) return;
          if (++seen >= n) {
            emitter.off('poll', listener);
            resolve();
          }
        };
        emitter.on('poll', listener);
      });
    },
    brokerDown() {
      down = true;
      options.onDown?.();
    },
    brokerUp() {
      down = false;
      options.onUp?.();
    },
    realTimeDelays: false,
    async deadLetters(queue) {
      const rows = await db.knex('bus_jobs').where({ state: 'dead' }).andWhere('queue', 'like', `%${queue}`).count<{ count: number }[]>({ count: '*' });
      return Number(rows[0]!.count);
    },
  };
  return { harness, closeAll: () => Promise.all(buses.map((b) => b.close().catch(() => {}))) };
}
