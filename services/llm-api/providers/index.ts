import { providerSyncGeneration, providersTables, syncRunsTables } from '../../../domains/catalog/index.js';
import type { LlmApiResource } from '../resource.js';
import { providerRoutes } from './routes.js';

/** Providers: admin registration, patch, sync; the provider list. */
export const providersResource: LlmApiResource = {
  name: 'providers',
  migrations: [providersTables, syncRunsTables, providerSyncGeneration],
  routes: providerRoutes,
  start: (deps) => deps.catalog.start(),
};

export type { ProviderDeps } from './providers.js';
