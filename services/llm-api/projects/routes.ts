import { z } from 'zod';
import { listOf, pageOf, routeGroup, type Route } from '../../kit/index.js';
import { createProject, deleteProject, getProject, listProjects, patchProject, type ProjectDeps } from './projects.js';
import { createProjectSchema, listProjectsQuery, projectDeletedSchema, projectObjectSchema, updateProjectSchema } from './schemas.js';

const byId = z.object({ projectId: z.string() });
const projects = routeGroup({ tag: 'projects', access: 'user' });

/** HTTP surface of projects: create, list (paginated, filters), get, patch, soft delete. */
export function projectRoutes(deps: { projects: ProjectDeps }): Route[] {
  return [
    projects.post('/v1/projects', {
      summary: 'Create a project',
      request: { body: createProjectSchema },
      response: { status: 201, schema: projectObjectSchema },
      handler: ({ principal, body }) => createProject(deps.projects, principal.userId, body),
    }),
    projects.get('/v1/projects', {
      summary: "List the caller's projects, most recently active first",
      request: { query: listProjectsQuery },
      response: { schema: listOf(projectObjectSchema) },
      handler: ({ principal, query }) =>
        listProjects(deps.projects, { userId: principal.userId, isArchived: query.is_archived, isFavorite: query.is_favorite }, pageOf(query)),
    }),
    projects.get('/v1/projects/:projectId', {
      summary: 'Get a project',
      request: { params: byId },
      response: { schema: projectObjectSchema },
      handler: ({ principal, params }) => getProject(deps.projects, principal.userId, params.projectId),
    }),
    projects.patch('/v1/projects/:projectId', {
      summary: 'Rename a project, change its instruction, archive or favourite it',
      request: { params: byId, body: updateProjectSchema },
      response: { schema: projectObjectSchema },
      handler: ({ principal, params, body }) => patchProject(deps.projects, principal.userId, params.projectId, body),
    }),
    projects.delete('/v1/projects/:projectId', {
      summary: 'Delete a project (its conversations stay, unlinked)',
      request: { params: byId },
      response: { schema: projectDeletedSchema },
      handler: ({ principal, params }) => deleteProject(deps.projects, principal.userId, params.projectId),
    }),
  ];
}
