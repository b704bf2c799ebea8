import type { LlmApiResource } from '../resource.js';
import { projectsMigrations } from './migrations.js';
import { mountProjectRoutes } from './routes.js';

/** Projects: create, list (paginated, filters), get, patch (archive/favourite), soft delete. */
export const projectsResource: LlmApiResource = {
  name: 'projects',
  migrations: projectsMigrations,
  mount: mountProjectRoutes,
};

export { findProject } from './store.js';
