import type { Router } from 'express';
import { parseInput, parsePage, principalOf, type ServiceContext } from '../../kit/index.js';
import { createProject, deleteProject, getProject, listProjects, patchProject, type ProjectDeps } from './projects.js';
import { createProjectSchema, listProjectsQuery, updateProjectSchema } from './schemas.js';

/** HTTP surface of projects (SPEC.md 4.4, plus DELETE). */
export function mountProjectRoutes(router: Router, ctx: ServiceContext): void {
  const deps: ProjectDeps = { knex: ctx.runtime.db.knex, clock: ctx.runtime.clock };

  router.post('/v1/projects', async (req, res) => {
    const input = parseInput(createProjectSchema, req.body);
    res.status(201).json(await createProject(deps, principalOf(req).userId, input));
  });

  router.get('/v1/projects', async (req, res) => {
    const page = parsePage(req.query);
    const q = req.query as Record<string, unknown>;
    const filters = parseInput(listProjectsQuery, { is_archived: q.is_archived, is_favorite: q.is_favorite });
    res.json(await listProjects(deps, { userId: principalOf(req).userId, isArchived: filters.is_archived, isFavorite: filters.is_favorite }, page));
  });

  router.get('/v1/projects/:projectId', async (req, res) => {
    res.json(await getProject(deps, principalOf(req).userId, String(req.params.projectId)));
  });

  router.patch('/v1/projects/:projectId', async (req, res) => {
    const input = parseInput(updateProjectSchema, req.body);
    res.json(await patchProject(deps, principalOf(req).userId, String(req.params.projectId), input));
  });

  router.delete('/v1/projects/:projectId', async (req, res) => {
    res.json(await deleteProject(deps, principalOf(req).userId, String(req.params.projectId)));
  });
}
