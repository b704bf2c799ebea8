import type { Request, Router } from 'express';
import { parseInput, parsePage, principalOf, type ServiceContext } from '../../kit/index.js';
import { activateBranch, createBranch, deleteItem, editItem, getBranch, listConversationBranches, regenerateItem, removeBranch } from './branches.js';
import { createConversation, deleteConversation, getConversation, listConversations, patchConversation, type ConversationDeps } from './conversations.js';
import { appendItems, getItem, listItems, parseInclude } from './items.js';
import {
  createBranchSchema,
  createConversationSchema,
  createItemsSchema,
  editItemSchema,
  itemQuery,
  listConversationsQuery,
  listItemsQuery,
  updateConversationSchema,
} from './schemas.js';

/** HTTP surface of conversations, items and branches (SPEC.md 4.3; paths as the openai SDK calls them). */
export function mountConversationRoutes(router: Router, ctx: ServiceContext): void {
  const deps: ConversationDeps = { knex: ctx.runtime.db.knex, clock: ctx.runtime.clock };
  const user = (req: Request) => principalOf(req).userId;
  const query = (req: Request) => req.query as Record<string, unknown>;
  // `include[]=a` (the SDK) and `include=a,b` / repeated `include=a` (curl) are one list.
  const include = (req: Request) => parseInclude(query(req).include ?? query(req)['include[]']);

  router.post('/v1/conversations', async (req, res) => {
    res.json(await createConversation(deps, user(req), parseInput(createConversationSchema, req.body)));
  });

  router.get('/v1/conversations', async (req, res) => {
    const page = parsePage(req.query);
    const filters = parseInput(listConversationsQuery, { project_id: query(req).project_id, referrer: query(req).referrer });
    res.json(await listConversations(deps, { userId: user(req), projectId: filters.project_id, referrer: filters.referrer }, page));
  });

  router.get('/v1/conversations/:conversationId', async (req, res) => {
    res.json(await getConversation(deps, user(req), String(req.params.conversationId)));
  });

  const update = async (req: Request, res: import('express').Response) => {
    res.json(await patchConversation(deps, user(req), String(req.params.conversationId), parseInput(updateConversationSchema, req.body)));
  };
  router.post('/v1/conversations/:conversationId', update);
  router.patch('/v1/conversations/:conversationId', update);

  router.delete('/v1/conversations/:conversationId', async (req, res) => {
    res.json(await deleteConversation(deps, user(req), String(req.params.conversationId)));
  });

  // --- items ---
  router.post('/v1/conversations/:conversationId/items', async (req, res) => {
    const includes = include(req);
    const body = parseInput(createItemsSchema, req.body);
    const result = await appendItems(deps.knex, {
      conversationId: String(req.params.conversationId),
      userId: user(req),
      items: body.items,
      clock: deps.clock,
      include: includes,
    });
    res.json({
      object: 'list',
      data: result.items,
      first_id: result.items[0]?.id ?? null,
      last_id: result.items.at(-1)?.id ?? null,
      has_more: false,
    });
  });

  router.get('/v1/conversations/:conversationId/items', async (req, res) => {
    const includes = include(req);
    const q = query(req);
    const parsed = parseInput(listItemsQuery, { limit: q.limit, order: q.order, after: q.after, branch: q.branch });
    res.json(await listItems(deps.knex, user(req), String(req.params.conversationId), { ...parsed, include: includes }));
  });

  router.get('/v1/conversations/:conversationId/items/:itemId', async (req, res) => {
    const includes = include(req);
    const { branch } = parseInput(itemQuery, { branch: query(req).branch });
    res.json(await getItem(deps.knex, user(req), String(req.params.conversationId), String(req.params.itemId), { include: includes, branch }));
  });

  router.delete('/v1/conversations/:conversationId/items/:itemId', async (req, res) => {
    res.json(await deleteItem(deps, user(req), String(req.params.conversationId), String(req.params.itemId)));
  });

  router.post('/v1/conversations/:conversationId/items/:itemId/edit', async (req, res) => {
    const { content } = parseInput(editItemSchema, req.body);
    res.json(await editItem(deps, user(req), String(req.params.conversationId), String(req.params.itemId), content));
  });

  router.post('/v1/conversations/:conversationId/items/:itemId/regenerate', async (req, res) => {
    res.json(await regenerateItem(deps, user(req), String(req.params.conversationId), String(req.params.itemId)));
  });

  // --- branches ---
  router.get('/v1/conversations/:conversationId/branches', async (req, res) => {
    res.json(await listConversationBranches(deps, user(req), String(req.params.conversationId)));
  });

  router.post('/v1/conversations/:conversationId/branches', async (req, res) => {
    res.status(201).json(await createBranch(deps, user(req), String(req.params.conversationId), parseInput(createBranchSchema, req.body)));
  });

  router.get('/v1/conversations/:conversationId/branches/:branch', async (req, res) => {
    res.json(await getBranch(deps, user(req), String(req.params.conversationId), String(req.params.branch)));
  });

  router.delete('/v1/conversations/:conversationId/branches/:branch', async (req, res) => {
    res.json(await removeBranch(deps, user(req), String(req.params.conversationId), String(req.params.branch)));
  });

  router.post('/v1/conversations/:conversationId/branches/:branch/activate', async (req, res) => {
    res.json(await activateBranch(deps, user(req), String(req.params.conversationId), String(req.params.branch)));
  });
}
