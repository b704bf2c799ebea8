import type { Router } from 'express';
import { parseInput, parsePage, requireAdmin } from '../../kit/index.js';
import type { LlmCore } from '../routing/core.js';
import { bulkToggle } from './bulk.js';
import { getCatalog, getProviderModel, listCatalogs, listModels, listProviderModels, patchCatalog, patchProviderModel, retrieveModel } from './domain.js';
import { bulkToggleSchema, catalogBulkToggleSchema, patchCatalogSchema, patchProviderModelSchema } from './schemas.js';

/** Model public ids may contain slashes: these routes take the rest of the path. */
const CATALOG = /^\/v1\/models\/catalogs\/(.+)$/;
const ADMIN_CATALOG = /^\/v1\/admin\/models\/catalogs\/(.+)$/;
const MODEL = /^\/v1\/models\/(?!providers$|catalogs\/)(.+)$/;

const rest = (params: Record<string, string | undefined>) => String(params[0] ?? '');

export function mountModelRoutes(router: Router, core: LlmCore): void {
  router.get('/v1/models', (req, res) => {
    res.json(listModels(core, String(req.headers['x-provider-data'] ?? '').toLowerCase() === 'true'));
  });
  router.get(CATALOG, async (req, res) => {
    res.json(await getCatalog(core, rest(req.params as Record<string, string>)));
  });

  router.get('/v1/admin/models/catalogs', requireAdmin, async (req, res) => {
    res.json(await listCatalogs(core, parsePage(req.query)));
  });
  router.post('/v1/admin/models/catalogs/bulk-toggle', requireAdmin, async (req, res) => {
    res.json(await bulkToggle(core, parseInput(catalogBulkToggleSchema, req.body)));
  });
  router.get(ADMIN_CATALOG, requireAdmin, async (req, res) => {
    res.json(await getCatalog(core, rest(req.params as Record<string, string>)));
  });
  router.patch(ADMIN_CATALOG, requireAdmin, async (req, res) => {
    res.json(await patchCatalog(core, rest(req.params as Record<string, string>), parseInput(patchCatalogSchema, req.body)));
  });

  router.get('/v1/admin/models/provider-models', requireAdmin, async (req, res) => {
    const providerId = typeof req.query.provider_id === 'string' && req.query.provider_id ? req.query.provider_id : undefined;
    res.json(await listProviderModels(core, providerId, parsePage(req.query)));
  });
  router.post('/v1/admin/models/provider-models/bulk-toggle', requireAdmin, async (req, res) => {
    res.json(await bulkToggle(core, parseInput(bulkToggleSchema, req.body)));
  });
  router.get('/v1/admin/models/provider-models/:id', requireAdmin, async (req, res) => {
    res.json(await getProviderModel(core, String(req.params.id)));
  });
  router.patch('/v1/admin/models/provider-models/:id', requireAdmin, async (req, res) => {
    res.json(await patchProviderModel(core, String(req.params.id), parseInput(patchProviderModelSchema, req.body)));
  });

  // OpenAI's GET /v1/models/{model}; registered last so /v1/models/providers and /catalogs win.
  router.get(MODEL, (req, res) => {
    res.json(retrieveModel(core, rest(req.params as Record<string, string>)));
  });
}
