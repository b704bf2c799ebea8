import type { LlmApiResource } from '../resource.js';
import { llmCore } from '../routing/core.js';
import { modelsTables } from './migrations.js';
import { mountModelRoutes } from './routes.js';

/** Models: GET /v1/models*, the catalog and provider-model administration, bulk toggles. */
export const modelsResource: LlmApiResource = {
  name: 'models',
  migrations: [modelsTables],
  async mount(router, ctx) {
    mountModelRoutes(router, await llmCore(ctx));
  },
};
