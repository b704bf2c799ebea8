import { z } from 'zod';
import { listOf, pageOf, pageQuery, routeGroup, type Route } from '../../kit/index.js';
import { deleteProvider, getProvider, getSyncRun, listProvidersAdmin, listSyncRuns, listProvidersPublic, patchProvider, registerProvider, requestSync, syncProviderNow, type ProviderDeps } from './providers.js';
import {
  deletedProviderSchema,
  deleteProviderQuery,
  patchProviderSchema,
  providerListSchema,
  providerObjectSchema,
  registeredProviderSchema,
  registerProviderSchema,
  requestSyncSchema,
  syncRequestSchema,
  syncResultSchema,
  syncRunSchema,
} from './schemas.js';

const byId = z.object({ providerId: z.string() });
const providers = routeGroup({ tag: 'providers', access: 'admin' });

/** HTTP surface of providers: administration (register, patch, sync) and the provider list every user sees. */
export function providerRoutes(deps: { providers: ProviderDeps }): Route[] {
  return [
    providers.post('/v1/admin/providers', {
      summary: 'Register a provider, then synchronise its models',
      request: { body: registerProviderSchema },
      response: { status: 201, schema: registeredProviderSchema },
      handler: ({ body }) => registerProvider(deps.providers, body),
    }),
    providers.get('/v1/admin/providers', {
      summary: 'List providers with their model counts',
      request: { query: pageQuery() },
      response: { schema: listOf(providerObjectSchema) },
      handler: ({ query }) => listProvidersAdmin(deps.providers, pageOf(query)),
    }),
    providers.post('/v1/admin/providers/sync', {
      summary: 'Ask the provider-sync worker to synchronise one provider or every active one; answers the id of the recorded run',
      request: { body: requestSyncSchema },
      response: { status: 202, schema: syncRequestSchema },
      handler: ({ body }) => requestSync(deps.providers, body.provider_id || undefined),
    }),
    providers.get('/v1/admin/providers/sync', {
      summary: 'List recent sync runs, newest first (on-demand and synchronous), with their status and counts',
      request: { query: pageQuery() },
      response: { schema: listOf(syncRunSchema) },
      handler: ({ query }) => listSyncRuns(deps.providers, pageOf(query)),
    }),
    providers.get('/v1/admin/providers/sync/:syncId', {
      summary: 'Status of an on-demand sync run: queued, running, succeeded or failed, with counts and error',
      request: { params: z.object({ syncId: z.string() }) },
      response: { schema: syncRunSchema },
      handler: ({ params }) => getSyncRun(deps.providers, params.syncId),
    }),
    providers.get('/v1/admin/providers/:providerId', {
      summary: 'Get a provider',
      request: { params: byId },
      response: { schema: providerObjectSchema },
      handler: ({ params }) => getProvider(deps.providers, params.providerId),
    }),
    providers.patch('/v1/admin/providers/:providerId', {
      summary: 'Change a provider (name, URL, key, endpoints, active…)',
      request: { params: byId, body: patchProviderSchema },
      response: { schema: providerObjectSchema },
      handler: ({ params, body }) => patchProvider(deps.providers, params.providerId, body),
    }),
    providers.delete('/v1/admin/providers/:providerId', {
      summary: 'Delete a provider: 409 while it still has enabled models, unless force=true removes them too',
      request: { params: byId, query: deleteProviderQuery },
      response: { schema: deletedProviderSchema },
      handler: ({ params, query }) => deleteProvider(deps.providers, params.providerId, { force: query.force }),
    }),
    providers.post('/v1/admin/providers/:providerId/sync', {
      summary: "Synchronise a provider's models now",
      request: { params: byId },
      response: { schema: syncResultSchema },
      handler: ({ params }) => syncProviderNow(deps.providers, params.providerId),
    }),
    providers.get('/v1/models/providers', {
      summary: 'List providers (active ones, without URLs, for non-admins)',
      access: 'user',
      response: { schema: providerListSchema },
      handler: ({ principal }) => listProvidersPublic(deps.providers, principal),
    }),
  ];
}
