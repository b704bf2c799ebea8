import { declareWebhookQueues, sealPlainHeaders, webhooksMigrationSet } from '../../../domains/webhooks/index.js';
import type { LlmApiResource } from '../resource.js';
import { webhookRoutes } from './routes.js';

/**
 * Webhook subscriptions (admin). Tables, stores and event names live in domains/webhooks, shared
 * with workers/webhook-delivery, which makes the deliveries.
 */
export const webhooksResource: LlmApiResource = {
  name: 'webhooks',
  migrations: [],
  ownMigrations: webhooksMigrationSet,
  routes: webhookRoutes,
  // The delivery worker's queues exist before any subscription can: events are kept for a worker
  // that has not started yet (deployed later, or down since before its first start).
  async start(deps, ctx) {
    await declareWebhookQueues(ctx.runtime.bus);
    // Header values stored in clear before they were sealed are sealed now (the worker does the same;
    // both read either form, so a failure here only leaves them in clear until the next start).
    const { webhooks, box, logger } = deps.webhooks;
    await sealPlainHeaders({ webhooks, box, logger }).catch((error) => logger.warn({ err: (error as Error).message }, 'sealing stored webhook header values failed; will try at the next start'));
  },
};

export type { WebhooksDeps } from './domain.js';
