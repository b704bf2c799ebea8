import type { Router } from 'express';
import { parseInput, principalOf, requireAdmin } from '../../kit/index.js';
import type { LlmCore } from '../routing/core.js';
import { requestSync, getProvider, listProvidersAdmin, listProvidersPublic, patchProvider, registerProvider, syncProviderNow } from './domain.js';
import { patchProviderSchema, registerProviderSchema } from './schemas.js';

export function mountProviderRoutes(router: Router, core: LlmCore): void {
  router.post('/v1/admin/providers', requireAdmin, async (req, res) => {
    const input = parseInput(registerProviderSchema, req.body);
    res.status(201).json(await registerProvider(core, input));
  });
  router.get('/v1/admin/providers', requireAdmin, async (_req, res) => {
    res.json(await listProvidersAdmin(core));
  });
  router.post('/v1/admin/providers/sync', requireAdmin, async (req, res) => {
    const providerId = typeof req.body?.provider_id === 'string' && req.body.provider_id ? req.body.provider_id : undefined;
    res.status(202).json(await requestSync(core, providerId));
  });
  router.get('/v1/admin/providers/:id', requireAdmin, async (req, res) => {
    res.json(await getProvider(core, String(req.params.id)));
  });
  router.patch('/v1/admin/providers/:id', requireAdmin, async (req, res) => {
    const input = parseInput(patchProviderSchema, req.body);
    res.json(await patchProvider(core, String(req.params.id), input));
  });
  router.post('/v1/admin/providers/:id/sync', requireAdmin, async (req, res) => {
    res.json(await syncProviderNow(core, String(req.params.id)));
  });
  router.get('/v1/models/providers', (req, res) => {
    res.json(listProvidersPublic(core, principalOf(req).isAdmin));
  });
}
