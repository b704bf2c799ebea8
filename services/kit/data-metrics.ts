import type { Knex } from 'knex';
import { Gauge, type Registry } from 'prom-client';
import type { Bus } from './bus/index.js';
import type { Clock } from './clock.js';
import { leaveOutOfScrape, oneReadPerScrape } from './http/metrics.js';

/**
 * State series for a service's /metrics, read at scrape time (the outbox and the queues are shared
 * by every process, so any scrape sees the whole backlog):
 *   outbox_events_pending              events written but not yet published to the bus
 *   outbox_oldest_pending_seconds      age of the oldest of them (0: the relay keeps up)
 *   bus_consumer_lag_messages{queue}   messages due on a queue and not yet taken by a consumer
 *   bus_consumer_lag_seconds{queue}    how long the oldest of them has waited (PostgreSQL queue only)
 * A failing read leaves the series out of that scrape (no value, not 0) instead of failing the whole /metrics.
 */
export function registerDataMetrics(registry: Registry, deps: { knex: Knex; bus: Bus; clock: Clock }): void {
  // Both outbox gauges come from one query per scrape.
  const readOutbox = oneReadPerScrape(async () => {
    const row = await deps.knex('outbox_events').whereNull('published_at').count({ n: '*' }).min({ oldest: 'occurred_at' }).first();
    const oldest = row?.oldest ? new Date(row.oldest as string).getTime() : null;
    return { pending: Number(row?.n ?? 0), oldestSeconds: oldest === null ? 0 : Math.max(0, (deps.clock.now() - oldest) / 1000) };
  });
  new Gauge({
    name: 'outbox_events_pending',
    help: 'Events written to the outbox and not yet published to the bus',
    registers: [registry],
    async collect() {
      const read = await readOutbox().catch(() => null);
      if (read) this.set(read.pending);
      else leaveOutOfScrape(this);
    },
  });
  new Gauge({
    name: 'outbox_oldest_pending_seconds',
    help: 'Age of the oldest unpublished outbox event (0 when the relay keeps up)',
    registers: [registry],
    async collect() {
      const read = await readOutbox().catch(() => null);
      if (read) this.set(read.oldestSeconds);
      else leaveOutOfScrape(this);
    },
  });

  const readBacklog = oneReadPerScrape(() => deps.bus.backlog());
  new Gauge({
    name: 'bus_consumer_lag_messages',
    help: 'Messages due on a bus queue and not yet taken by a consumer, by queue',
    labelNames: ['queue'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const q of await readBacklog().catch(() => [])) this.set({ queue: q.queue }, q.ready);
    },
  });
  new Gauge({
    name: 'bus_consumer_lag_seconds',
    help: 'How long the oldest due message of a bus queue has waited for a consumer, by queue (PostgreSQL queue only)',
    labelNames: ['queue'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const q of await readBacklog().catch(() => [])) if (q.oldestSeconds !== null) this.set({ queue: q.queue }, q.oldestSeconds);
    },
  });
}
