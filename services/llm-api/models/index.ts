import { modelsTables } from '../../../domains/catalog/index.js';
import type { LlmApiResource } from '../resource.js';
import { modelRoutes } from './routes.js';

/** Models: GET /v1/models*, the catalog and provider-model administration, bulk toggles. */
export const modelsResource: LlmApiResource = {
  name: 'models',
  migrations: [modelsTables],
  routes: modelRoutes,
  start: (deps) => deps.catalog.start(),
};

export type { ModelDeps } from './models.js';
