import type { Registry } from 'prom-client';
import { oneReadPerScrape, stateGauge, type Clock } from '../../services/kit/index.js';
import type { DeliveriesStore } from './deliveries-store.js';

/**
 * Webhook series for a service's /metrics, read from the database at scrape time: the delivery
 * worker may run in another process, and the database is what every worker records into.
 *   webhook_delivery_attempts_recent{outcome}  attempts recorded in the last hour (delivered, retry, failed, dead)
 *   webhook_deliveries_pending                 deliveries waiting for an attempt
 *   webhook_delivery_lag_seconds               how long the oldest due delivery has waited (0: keeping up)
 * A failing read (the database down) leaves its series without a value in that scrape (`stateGauge`).
 */
export const RECENT_ATTEMPTS_WINDOW_MS = 3_600_000;

export function registerWebhookMetrics(registry: Registry, deps: { deliveries: DeliveriesStore; clock: Clock }): void {
  const outcomes = ['delivered', 'retry', 'failed', 'dead'] as const;
  // The pending count and the lag of one scrape come from one read (a lag beside nothing pending otherwise).
  const backlog = oneReadPerScrape(() => deps.deliveries.backlog(new Date(deps.clock.now())));
  stateGauge(registry, {
    name: 'webhook_delivery_attempts_recent',
    help: 'Webhook delivery attempts recorded in the last hour, by outcome (delivered, retry, failed, dead)',
    labelNames: ['outcome'] as const,
    read: () => deps.deliveries.attemptsSince(new Date(deps.clock.now() - RECENT_ATTEMPTS_WINDOW_MS)),
    show: (gauge, counts) => {
      for (const outcome of outcomes) gauge.set({ outcome }, counts[outcome] ?? 0);
    },
  });
  stateGauge(registry, {
    name: 'webhook_deliveries_pending',
    help: 'Webhook deliveries waiting for an attempt (new or between retries)',
    read: backlog,
    show: (gauge, read) => gauge.set(read.pending),
  });
  stateGauge(registry, {
    name: 'webhook_delivery_lag_seconds',
    help: 'Seconds the oldest due webhook delivery has waited past its attempt time (0 when the workers keep up)',
    read: backlog,
    show: (gauge, read) => gauge.set(read.oldestDue ? Math.max(0, (deps.clock.now() - read.oldestDue.getTime()) / 1000) : 0),
  });
}
