import { webhooksMigrationSet } from '../../../domains/webhooks/index.js';
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
};

export type { WebhooksDeps } from './domain.js';
