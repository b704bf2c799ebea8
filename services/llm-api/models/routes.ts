import { z } from 'zod';
import { listOf, pageOf, pageQuery, routeGroup, type Route } from '../../kit/index.js';
import { bulkToggle } from './bulk.js';
import { getCatalog, getProviderModel, listCatalogs, listModels, listProviderModels, patchCatalog, patchProviderModel, retrieveModel, type ModelDeps } from './models.js';
import {
  bulkResultSchema,
  bulkToggleSchema,
  catalogBulkToggleSchema,
  catalogObjectSchema,
  modelListSchema,
  modelEntrySchema,
  patchCatalogSchema,
  patchProviderModelSchema,
  providerModelObjectSchema,
  providerModelsQuery,
} from './schemas.js';

// Model public ids may contain slashes (`org/model`): their routes end in a `*wildcard`.
const byPublicId = z.object({ publicId: z.string() });
const byModel = z.object({ model: z.string() });
const byProviderModel = z.object({ providerModelId: z.string() });
const models = routeGroup({ tag: 'models', access: 'admin' });

/** HTTP surface of models: OpenAI's model list and lookup, the catalog, provider-model administration. */
export function modelRoutes(deps: { models: ModelDeps }): Route[] {
  return [
    models.get('/v1/models', {
      summary: 'List available models, best provider first (X-Provider-Data: true adds the provider)',
      access: 'user',
      response: { schema: modelListSchema },
      handler: ({ req, principal }) => listModels(deps.models, principal, String(req.headers['x-provider-data'] ?? '').toLowerCase() === 'true'),
    }),
    models.get('/v1/models/catalogs/*publicId', {
      summary: "Get a model's catalog entry",
      access: 'user',
      request: { params: byPublicId },
      response: { schema: catalogObjectSchema },
      handler: ({ params, principal }) => getCatalog(deps.models, params.publicId, principal),
    }),
    models.get('/v1/admin/models/catalogs', {
      summary: 'List catalog entries',
      request: { query: pageQuery() },
      response: { schema: listOf(catalogObjectSchema) },
      handler: ({ query }) => listCatalogs(deps.models, pageOf(query)),
    }),
    models.post('/v1/admin/models/catalogs/bulk-toggle', {
      summary: 'Enable or disable the provider models of many catalog entries',
      request: { body: catalogBulkToggleSchema },
      response: { schema: bulkResultSchema },
      handler: ({ body }) => bulkToggle(deps.models, body),
    }),
    models.get('/v1/admin/models/catalogs/*publicId', {
      summary: 'Get a catalog entry',
      request: { params: byPublicId },
      response: { schema: catalogObjectSchema },
      handler: ({ params }) => getCatalog(deps.models, params.publicId),
    }),
    models.patch('/v1/admin/models/catalogs/*publicId', {
      summary: 'Change a catalog entry by hand (synchronisation then leaves those fields alone)',
      request: { params: byPublicId, body: patchCatalogSchema },
      response: { schema: catalogObjectSchema },
      handler: ({ params, body }) => patchCatalog(deps.models, params.publicId, body),
    }),
    models.get('/v1/admin/models/provider-models', {
      summary: 'List provider models, optionally of one provider',
      request: { query: providerModelsQuery },
      response: { schema: listOf(providerModelObjectSchema) },
      handler: ({ query }) => listProviderModels(deps.models, query.provider_id, pageOf(query)),
    }),
    models.post('/v1/admin/models/provider-models/bulk-toggle', {
      summary: 'Enable or disable many provider models',
      request: { body: bulkToggleSchema },
      response: { schema: bulkResultSchema },
      handler: ({ body }) => bulkToggle(deps.models, body),
    }),
    models.get('/v1/admin/models/provider-models/:providerModelId', {
      summary: 'Get a provider model',
      request: { params: byProviderModel },
      response: { schema: providerModelObjectSchema },
      handler: ({ params }) => getProviderModel(deps.models, params.providerModelId),
    }),
    models.patch('/v1/admin/models/provider-models/:providerModelId', {
      summary: 'Change a provider model (pricing, order, limits, active…)',
      request: { params: byProviderModel, body: patchProviderModelSchema },
      response: { schema: providerModelObjectSchema },
      handler: ({ params, body }) => patchProviderModel(deps.models, params.providerModelId, body),
    }),
    // OpenAI's GET /v1/models/{model}; last, so /v1/models/providers and /catalogs/… win.
    models.get('/v1/models/*model', {
      summary: 'Get a model',
      access: 'user',
      request: { params: byModel },
      response: { schema: modelEntrySchema },
      handler: ({ params, principal }) => retrieveModel(deps.models, principal, params.model),
    }),
  ];
}
