import { declareWebhookQueues, webhooksMigrationSet } from '../../../domains/webhooks/index.js';
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
  start: (_deps, ctx) => declareWebhookQueues(ctx.runtime.bus),
};

export type { WebhooksDeps } from './domain.js';
