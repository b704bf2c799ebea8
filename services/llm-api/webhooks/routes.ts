import type { Router } from 'express';
import { parseInput, parsePage, principalOf, requireAdmin } from '../../kit/index.js';
import * as domain from './domain.js';
import { createWebhookSchema, deliveryStatusQuery, updateWebhookSchema } from './schemas.js';

/** Admin API of webhook subscriptions (SPEC.md 4.5) and their deliveries. Every route needs an admin. */
export function mountWebhookRoutes(router: Router, deps: domain.WebhooksDeps): void {
  const base = '/v1/admin/webhooks';
  const id = (value: unknown) => String(value);

  router.post(base, requireAdmin, async (req, res) => {
    const input = parseInput(createWebhookSchema, req.body);
    res.status(201).json(await domain.createWebhook(deps, input, principalOf(req).userId));
  });

  router.get(base, requireAdmin, async (req, res) => {
    res.json(await domain.listWebhooks(deps, parsePage(req.query)));
  });

  router.get(`${base}/:webhook_id`, requireAdmin, async (req, res) => {
    res.json(await domain.getWebhook(deps, id(req.params.webhook_id)));
  });

  router.patch(`${base}/:webhook_id`, requireAdmin, async (req, res) => {
    const input = parseInput(updateWebhookSchema, req.body);
    res.json(await domain.updateWebhook(deps, id(req.params.webhook_id), input));
  });

  router.delete(`${base}/:webhook_id`, requireAdmin, async (req, res) => {
    await domain.deleteWebhook(deps, id(req.params.webhook_id));
    res.status(204).end();
  });

  router.post(`${base}/:webhook_id/rotate-secret`, requireAdmin, async (req, res) => {
    res.json(await domain.rotateSecret(deps, id(req.params.webhook_id)));
  });

  router.get(`${base}/:webhook_id/deliveries`, requireAdmin, async (req, res) => {
    const { status } = parseInput(deliveryStatusQuery, { status: req.query.status });
    res.json(await domain.listDeliveries(deps, id(req.params.webhook_id), parsePage(req.query), status));
  });

  router.get(`${base}/:webhook_id/deliveries/:delivery_id`, requireAdmin, async (req, res) => {
    res.json(await domain.getDelivery(deps, id(req.params.webhook_id), id(req.params.delivery_id)));
  });

  router.post(`${base}/:webhook_id/deliveries/:delivery_id/redeliver`, requireAdmin, async (req, res) => {
    res.status(202).json(await domain.redeliver(deps, id(req.params.webhook_id), id(req.params.delivery_id)));
  });
}
