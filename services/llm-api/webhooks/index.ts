import { createEgressGuard, createSecretBox, loadMasterKey } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';
import { createDeliveriesStore } from './deliveries-store.js';
import { webhooksMigrationSet } from './migrations.js';
import { mountWebhookRoutes } from './routes.js';
import { createWebhooksStore } from './store.js';

/** Webhook subscriptions (admin). Deliveries are made by workers/webhook-delivery. */
export const webhooksResource: LlmApiResource = {
  name: 'webhooks',
  migrations: [],
  ownMigrations: webhooksMigrationSet,
  mount(router, ctx) {
    const { config, db, bus, clock, logger } = ctx.runtime;
    mountWebhookRoutes(router, {
      webhooks: createWebhooksStore(db.knex),
      deliveries: createDeliveriesStore(db.knex),
      box: createSecretBox(loadMasterKey(config)),
      guard: createEgressGuard({ allowHosts: config.EGRESS_ALLOW_HOSTS }),
      bus,
      clock,
      logger: logger.child({ resource: 'webhooks' }),
      secretGraceSeconds: config.WEBHOOK_SECRET_GRACE_SECONDS,
    });
  },
};
