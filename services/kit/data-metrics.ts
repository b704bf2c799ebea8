import type { Knex } from 'knex';
import type { Registry } from 'prom-client';
import type { Bus } from './bus/index.js';
import type { Clock } from './clock.js';
import { oneReadPerScrape, stateGauge } from './http/metrics.js';

/**
 * State series for a service's /metrics, read at scrape time (the outbox and the queues are shared
 * by every process, so any scrape sees the whole backlog):
 *   outbox_events_pending              events written but not yet published to the bus
 *   outbox_oldest_pending_seconds      age of the oldest of them (0: the relay keeps up)
 *   outbox_events_dead                 events parked: the bus refused them for good (outbox/outbox.ts)
 *   bus_consumer_lag_messages{queue}   messages due on a queue and not yet taken by a consumer
 *   bus_consumer_lag_seconds{queue}    how long the oldest of them has waited (PostgreSQL queue only)
 * A failing read leaves the series without a value in that scrape instead of failing the whole /metrics (`stateGauge`).
 */
export function registerDataMetrics(registry: Registry, deps: { knex: Knex; bus: Bus; clock: Clock }): void {
  // Both outbox gauges come from one query per scrape.
  // Each part reads its own partial index (pending rows; parked ones), never the published rows.
  const readOutbox = oneReadPerScrape(async () => {
    const result = await deps.knex.raw(
      `select (select count(*) from outbox_events where published_at is null and dead_at is null) as n,
              (select min(occurred_at) from outbox_events where published_at is null and dead_at is null) as oldest,
              (select count(*) from outbox_events where dead_at is not null) as dead`,
    );
    const row = (result.rows ?? [])[0] as { n?: unknown; oldest?: unknown; dead?: unknown } | undefined;
    const oldest = row?.oldest ? new Date(row.oldest as string).getTime() : null;
    return { pending: Number(row?.n ?? 0), dead: Number(row?.dead ?? 0), oldestSeconds: oldest === null ? 0 : Math.max(0, (deps.clock.now() - oldest) / 1000) };
  });
  stateGauge(registry, {
    name: 'outbox_events_pending',
    help: 'Events written to the outbox and not yet published to the bus',
    read: readOutbox,
    show: (gauge, outbox) => gauge.set(outbox.pending),
  });
  stateGauge(registry, {
    name: 'outbox_oldest_pending_seconds',
    help: 'Age of the oldest unpublished outbox event (0 when the relay keeps up)',
    read: readOutbox,
    show: (gauge, outbox) => gauge.set(outbox.oldestSeconds),
  });
  stateGauge(registry, {
    name: 'outbox_events_dead',
    help: 'Outbox events parked after the bus refused them OUTBOX_PUBLISH_ATTEMPTS times; they wait for an operator',
    read: readOutbox,
    show: (gauge, outbox) => gauge.set(outbox.dead),
  });

  const readBacklog = oneReadPerScrape(() => deps.bus.backlog());
  stateGauge(registry, {
    name: 'bus_consumer_lag_messages',
    help: 'Messages due on a bus queue and not yet taken by a consumer, by queue',
    labelNames: ['queue'] as const,
    read: readBacklog,
    show: (gauge, queues) => {
      for (const q of queues) gauge.set({ queue: q.queue }, q.ready);
    },
  });
  stateGauge(registry, {
    name: 'bus_consumer_lag_seconds',
    help: 'How long the oldest due message of a bus queue has waited for a consumer, by queue (PostgreSQL queue only)',
    labelNames: ['queue'] as const,
    read: readBacklog,
    show: (gauge, queues) => {
      for (const q of queues) if (q.oldestSeconds !== null) gauge.set({ queue: q.queue }, q.oldestSeconds);
    },
  });
  stateGauge(registry, {
    name: 'bus_dead_letters',
    help: 'Messages in the dead letters of a bus queue (their handler kept failing), by queue; they wait for an operator',
    labelNames: ['queue'] as const,
    read: readBacklog,
    show: (gauge, queues) => {
      for (const q of queues) gauge.set({ queue: q.queue }, q.dead);
    },
  });
}
