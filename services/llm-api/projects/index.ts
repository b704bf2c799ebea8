import type { LlmApiResource } from '../resource.js';
import { projectsMigrations } from './migrations.js';
import { projectRoutes } from './routes.js';

/** Projects: create, list (paginated, filters), get, patch (archive/favourite), soft delete. */
export const projectsResource: LlmApiResource = {
  name: 'projects',
  migrations: projectsMigrations,
  routes: projectRoutes,
};

export type { ProjectDeps } from './projects.js';
export { findProject } from './store.js';
