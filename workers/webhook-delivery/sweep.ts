import type { Bus, Clock, Logger } from '../../services/kit/index.js';
import { sendDeliveryJob, type DeliveriesStore } from '../../domains/webhooks/index.js';

/** Deliveries re-enqueued by one sweep at most. */
export const SWEEP_BATCH = 500;

/**
 * The safety net: a pending delivery whose next attempt is overdue by `graceMs` gets a new job
 * (its job may have been lost; a duplicate is dropped by the attempt's compare-and-set), and is
 * marked as re-enqueued: the next re-enqueue of the same attempt waits twice as long as the last
 * (`DeliveriesStore.overdue`), so a backlog behind a slow receiver does not pile up duplicates, and
 * its rows still backing off are not read again: the sweep's cost stays that of the rows it sends.
 * Returns how many it re-enqueued.
 */
export async function sweepOverdue(deps: { deliveries: DeliveriesStore; bus: Bus; clock: Clock; logger: Logger; graceMs: number }): Promise<number> {
  const overdue = await deps.deliveries.overdue(new Date(deps.clock.now()), deps.graceMs, SWEEP_BATCH);
  for (const d of overdue) await sendDeliveryJob(deps.bus, d);
  await deps.deliveries.touch(overdue, new Date(deps.clock.now()), deps.graceMs);
  if (overdue.length) deps.logger.warn({ count: overdue.length }, 're-enqueued overdue webhook deliveries');
  return overdue.length;
}
