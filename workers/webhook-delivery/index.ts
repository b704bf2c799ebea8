import { createEgressGuard, createSecretBox, loadConfig, loadMasterKey, runEvery, type BusMessage, type Delivery, type WorkerDefinition } from '../../services/kit/index.js';
import {
  createDeliveriesStore,
  createWebhooksStore,
  DELIVERY_QUEUE,
  FANOUT_BINDINGS,
  FANOUT_QUEUE,
  sealPlainHeaders,
  webhooksConfigShape,
  webhooksMigrationSet,
} from '../../domains/webhooks/index.js';
import { createDeliveryHandler } from './deliver.js';
import { createFanoutHandler } from './fanout.js';
import { sweepOverdue } from './sweep.js';

/** How often ended deliveries past their retention are deleted. */
const PRUNE_EVERY_MS = 3_600_000;

/**
 * workers/webhook-delivery: events from the outbox (topic exchange) → fan-out → one job per
 * delivery → signed POST, recorded, retried on WEBHOOK_RETRY_SCHEDULE. Runs in `npm start`
 * (services/platform/registry.ts) or alone (main.ts); several workers may run at once.
 */
export const webhookDeliveryWorker: WorkerDefinition = {
  name: 'webhook-delivery',
  config: webhooksConfigShape,
  // Idempotent: whichever of llm-api and this worker migrates first creates the tables.
  migrations: [webhooksMigrationSet],
  async start(ctx) {
    const { config: base, db, bus, clock } = ctx.runtime;
    const config = { ...base, ...loadConfig(webhooksConfigShape, base.env) };
    const logger = ctx.runtime.logger.child({ worker: 'webhook-delivery' });
    const webhooks = createWebhooksStore(db.knex);
    const deliveries = createDeliveriesStore(db.knex);
    const box = createSecretBox(loadMasterKey(config));
    const guard = createEgressGuard({ allowHosts: config.EGRESS_ALLOW_HOSTS });
    // Header values stored in clear before they were sealed (llm-api does the same when it starts).
    await sealPlainHeaders({ webhooks, box, logger }).catch((error) => logger.warn({ err: (error as Error).message }, 'sealing stored webhook header values failed; will try at the next start'));

    // Handlers in flight, so stop() can let them finish.
    const running = new Set<Promise<unknown>>();
    const tracked = <T>(handler: (m: BusMessage<T>, d: Delivery) => Promise<void>) => (m: BusMessage<T>, d: Delivery) => {
      const p = handler(m, d);
      running.add(p);
      return p.finally(() => running.delete(p));
    };

    const deliver = createDeliveryHandler({
      deliveries,
      box,
      guard,
      clock,
      logger,
      schedule: config.WEBHOOK_RETRY_SCHEDULE,
      timeoutMs: config.WEBHOOK_TIMEOUT_MS,
      concurrencyPerSubscription: config.WEBHOOK_CONCURRENCY_PER_SUBSCRIPTION,
      prefetch: config.WEBHOOK_PREFETCH,
      busyDelayMs: config.WEBHOOK_BUSY_DELAY_MS,
    });
    const fanout = createFanoutHandler({ webhooks, deliveries, bus, clock, logger });
    // The delivery queue first: it exists before the fan-out sends to it.
    const consumers = [
      await bus.consume({ queue: DELIVERY_QUEUE, prefetch: config.WEBHOOK_PREFETCH }, tracked(deliver)),
      await bus.consume({ queue: FANOUT_QUEUE, bindings: FANOUT_BINDINGS, prefetch: config.BUS_PREFETCH }, tracked(fanout)),
    ];

    // Safety net: a pending delivery overdue by the grace period gets a new job (duplicates are dropped).
    const sweep = () => sweepOverdue({ deliveries, bus, clock, logger, graceMs: config.WEBHOOK_SWEEP_GRACE_MS });
    const sweeps =
      config.WEBHOOK_SWEEP_INTERVAL_MS > 0
        ? runEvery(config.WEBHOOK_SWEEP_INTERVAL_MS, sweep, (error) => logger.warn({ err: error.message }, 'webhook sweep failed; will try again'))
        : undefined;

    // Ended deliveries are kept for WEBHOOK_DELIVERY_RETENTION_DAYS (looked into, redelivered), then deleted.
    const retentionMs = config.WEBHOOK_DELIVERY_RETENTION_DAYS * 86_400_000;
    const pruning =
      retentionMs > 0
        ? runEvery(
            PRUNE_EVERY_MS,
            async () => {
              const removed = await deliveries.pruneEnded(new Date(clock.now() - retentionMs));
              if (removed) logger.info({ removed }, 'deleted webhook deliveries past their retention');
            },
            (error) => logger.warn({ err: error.message }, 'deleting old webhook deliveries failed; will try again'),
            { immediate: true },
          )
        : undefined;

    return {
      async stop() {
        await sweeps?.stop();
        await pruning?.stop();
        // Stop taking jobs, let attempts in flight finish and be recorded and acked, then close.
        const drainMs = config.WEBHOOK_TIMEOUT_MS + 5000;
        await Promise.all(consumers.map((consumer) => consumer.cancel({ drainMs })));
        await Promise.allSettled([...running]);
      },
    };
  },
};
