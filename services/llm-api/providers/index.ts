import type { LlmApiResource } from '../resource.js';
import { llmCore } from '../routing/core.js';
import { providersTables } from './migrations.js';
import { mountProviderRoutes } from './routes.js';

/** Providers: admin registration, patch, sync; public provider list. */
export const providersResource: LlmApiResource = {
  name: 'providers',
  migrations: [providersTables],
  async mount(router, ctx) {
    mountProviderRoutes(router, await llmCore(ctx));
  },
};
