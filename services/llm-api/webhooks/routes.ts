import { listOf, pageOf, pageQuery, route, type Route } from '../../kit/index.js';
import * as domain from './domain.js';
import {
  createWebhookSchema,
  deliveryObjectSchema,
  deliveryParams,
  listDeliveriesQuery,
  updateWebhookSchema,
  webhookObjectSchema,
  webhookParams,
} from './schemas.js';

/** Admin API of webhook subscriptions and their deliveries. Every route needs an administrator. */
export function webhookRoutes(deps: { webhooks: domain.WebhooksDeps }): Route[] {
  const base = '/v1/admin/webhooks';
  const common = { access: 'admin', tag: 'webhooks' } as const;
  return [
    route({
      ...common,
      method: 'post',
      path: base,
      summary: 'Subscribe a URL to events (the answer shows the signing secret once)',
      request: { body: createWebhookSchema },
      response: { status: 201, schema: webhookObjectSchema, noStore: true },
      handler: ({ principal, body }) => domain.createWebhook(deps.webhooks, body, principal.userId),
    }),
    route({
      ...common,
      method: 'get',
      path: base,
      summary: 'List webhook subscriptions, newest first',
      request: { query: pageQuery() },
      response: { schema: listOf(webhookObjectSchema) },
      handler: ({ query }) => domain.listWebhooks(deps.webhooks, pageOf(query)),
    }),
    route({
      ...common,
      method: 'get',
      path: `${base}/:webhook_id`,
      summary: 'Get a webhook subscription',
      request: { params: webhookParams },
      response: { schema: webhookObjectSchema },
      handler: ({ params }) => domain.getWebhook(deps.webhooks, params.webhook_id),
    }),
    route({
      ...common,
      method: 'patch',
      path: `${base}/:webhook_id`,
      summary: 'Change a subscription (URL, events, active, headers, or rotate to a given secret)',
      request: { params: webhookParams, body: updateWebhookSchema },
      response: { schema: webhookObjectSchema },
      handler: ({ params, body }) => domain.updateWebhook(deps.webhooks, params.webhook_id, body),
    }),
    route({
      ...common,
      method: 'delete',
      path: `${base}/:webhook_id`,
      summary: 'Delete a subscription and its deliveries',
      request: { params: webhookParams },
      response: { status: 204 },
      handler: async ({ params }) => {
        await domain.deleteWebhook(deps.webhooks, params.webhook_id);
      },
    }),
    route({
      ...common,
      method: 'post',
      path: `${base}/:webhook_id/rotate-secret`,
      summary: 'Generate a new signing secret (the old one also signs during the grace period)',
      request: { params: webhookParams },
      response: { schema: webhookObjectSchema, noStore: true },
      handler: ({ params }) => domain.rotateSecret(deps.webhooks, params.webhook_id),
    }),
    route({
      ...common,
      method: 'post',
      path: `${base}/:webhook_id/test`,
      summary: 'Send a signed webhook.test event to this subscription',
      request: { params: webhookParams },
      response: { status: 202, schema: deliveryObjectSchema },
      handler: ({ params }) => domain.sendTestEvent(deps.webhooks, params.webhook_id),
    }),
    route({
      ...common,
      method: 'get',
      path: `${base}/:webhook_id/deliveries`,
      summary: 'List deliveries of a subscription, newest first, each with its attempts',
      request: { params: webhookParams, query: listDeliveriesQuery },
      response: { schema: listOf(deliveryObjectSchema) },
      handler: ({ params, query }) => domain.listDeliveries(deps.webhooks, params.webhook_id, pageOf(query), query.status),
    }),
    route({
      ...common,
      method: 'get',
      path: `${base}/:webhook_id/deliveries/:delivery_id`,
      summary: 'Get a delivery with its attempts',
      request: { params: deliveryParams },
      response: { schema: deliveryObjectSchema },
      handler: ({ params }) => domain.getDelivery(deps.webhooks, params.webhook_id, params.delivery_id),
    }),
    route({
      ...common,
      method: 'post',
      path: `${base}/:webhook_id/deliveries/:delivery_id/redeliver`,
      summary: 'Send a finished delivery again (a new run of the retry schedule)',
      request: { params: deliveryParams },
      response: { status: 202, schema: deliveryObjectSchema },
      handler: ({ params }) => domain.redeliver(deps.webhooks, params.webhook_id, params.delivery_id),
    }),
  ];
}
