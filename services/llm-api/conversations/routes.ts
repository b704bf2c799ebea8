import { z } from 'zod';
import { cursorEnvelope, pageOf, pageQuery, route, type Route } from '../../kit/index.js';
import { activateBranch, createBranch, deleteItem, editItem, getBranch, listConversationBranches, regenerateItem, removeBranch } from './branches.js';
import { createConversation, deleteConversation, getConversation, listConversations, patchConversation, type ConversationDeps } from './conversations.js';
import { appendItems, getItem, listItems, parseInclude, type AppendItemsInput } from './items.js';
import {
  appendTurnSchema,
  createBranchSchema,
  createConversationSchema,
  createItemsSchema,
  editItemSchema,
  itemQuery,
  listConversationsQuery,
  listItemsQuery,
  TURN_BODY_LIMIT,
  TURN_ITEMS_MAX,
  turnAppendedSchema,
  updateConversationSchema,
} from './schemas.js';

const conversation = z.object({ conversationId: z.string() });
const item = conversation.extend({ itemId: z.string() });
const branch = conversation.extend({ branch: z.string() });
/** `include[]=a` (the SDK) and `include=a,b` / repeated `include=a` (curl) are one list. */
const includeQuery = z.object({ include: z.unknown().optional(), 'include[]': z.unknown().optional() });
const includesOf = (query: { include?: unknown; 'include[]'?: unknown }) => parseInclude(query.include ?? query['include[]']);

/** HTTP surface of conversations, items and branches (paths as the openai SDK calls them). */
export function conversationRoutes(deps: { conversations: ConversationDeps }): Route[] {
  const common = { access: 'user', tag: 'conversations' } as const;
  const update = (method: 'post' | 'patch') =>
    route({
      ...common,
      method,
      path: '/v1/conversations/:conversationId',
      summary: method === 'post' ? 'Update a conversation (the openai SDK form)' : 'Update a conversation: metadata, title, project',
      request: { params: conversation, body: updateConversationSchema },
      handler: ({ principal, params, body }) => patchConversation(deps.conversations, principal.userId, params.conversationId, body),
    });
  /** Both item appends, public and internal: one call of the items domain, one transaction. */
  const append = (userId: string, conversationId: string, items: unknown[], include: string[] = [], answer: Pick<AppendItemsInput, 'model' | 'tokensUsed' | 'answerFrom'> = {}) =>
    appendItems(deps.conversations.knex, { conversationId, userId, items, clock: deps.conversations.clock, include, ...answer });
  return [
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations',
      summary: 'Create a conversation, optionally with its first items',
      request: { body: createConversationSchema },
      handler: ({ principal, body }) => createConversation(deps.conversations, principal.userId, body),
    }),
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations',
      summary: "List the caller's conversations, most recently active first",
      request: { query: pageQuery().extend(listConversationsQuery.shape) },
      handler: ({ principal, query }) =>
        listConversations(deps.conversations, { userId: principal.userId, projectId: query.project_id, referrer: query.referrer }, pageOf(query)),
    }),
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations/:conversationId',
      summary: 'Get a conversation',
      request: { params: conversation },
      handler: ({ principal, params }) => getConversation(deps.conversations, principal.userId, params.conversationId),
    }),
    update('post'),
    update('patch'),
    route({
      ...common,
      method: 'delete',
      path: '/v1/conversations/:conversationId',
      summary: 'Delete a conversation (404 from then on; kept stored, or erased after CONVERSATION_PURGE_AFTER_DAYS when set)',
      request: { params: conversation },
      handler: ({ principal, params }) => deleteConversation(deps.conversations, principal.userId, params.conversationId),
    }),

    // --- items ---
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations/:conversationId/items',
      summary: "Append items to the conversation's active branch",
      request: { params: conversation, body: createItemsSchema, query: includeQuery },
      handler: async ({ principal, params, body, query }) => cursorEnvelope((await append(principal.userId, params.conversationId, body.items, includesOf(query))).items, false),
    }),
    route({
      // response-api's write of a Responses turn, which may hold more items than the public route
      // takes per request: one request, so the turn is in the conversation whole or not at all.
      method: 'post',
      path: '/internal/conversations/:conversationId/items',
      summary: `Append a Responses turn's items (1 to ${TURN_ITEMS_MAX}) to a user's conversation in one transaction; answers with their count and first and last ids`,
      access: 'internal',
      tag: 'conversations',
      bodyLimit: TURN_BODY_LIMIT,
      request: { params: conversation, body: appendTurnSchema },
      response: { schema: turnAppendedSchema },
      handler: async ({ params, body }) => {
        const { items } = await append(body.user_id, params.conversationId, body.items, [], { model: body.model, tokensUsed: body.tokens_used, answerFrom: body.answer_from });
        // The caller wrote the turn and keeps it: echoing up to 2000 items (32 MiB) back is waste.
        return { object: 'conversation.items.appended', count: items.length, first_id: items[0]!.id, last_id: items.at(-1)!.id };
      },
    }),
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations/:conversationId/items',
      summary: 'List the items of a branch (cursor `after`/`order`, or `offset`)',
      request: { params: conversation, query: listItemsQuery.extend(includeQuery.shape) },
      handler: ({ principal, params, query }) =>
        listItems(deps.conversations.knex, principal.userId, params.conversationId, {
          limit: query.limit,
          order: query.order,
          after: query.after,
          offset: query.offset,
          branch: query.branch,
          include: includesOf(query),
        }),
    }),
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations/:conversationId/items/:itemId',
      summary: 'Get an item',
      request: { params: item, query: itemQuery.extend(includeQuery.shape) },
      handler: ({ principal, params, query }) =>
        getItem(deps.conversations.knex, principal.userId, params.conversationId, params.itemId, { include: includesOf(query), branch: query.branch }),
    }),
    route({
      ...common,
      method: 'delete',
      path: '/v1/conversations/:conversationId/items/:itemId',
      summary: 'Delete an item: MAIN continues without it, the old MAIN is kept as a backup branch',
      request: { params: item },
      handler: ({ principal, params }) => deleteItem(deps.conversations, principal.userId, params.conversationId, params.itemId),
    }),
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations/:conversationId/items/:itemId/edit',
      summary: 'Edit a message: a new branch from before it, with the new content',
      request: { params: item, body: editItemSchema },
      handler: ({ principal, params, body }) => editItem(deps.conversations, principal.userId, params.conversationId, params.itemId, body.content),
    }),
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations/:conversationId/items/:itemId/regenerate',
      summary: 'Regenerate from a message: a new branch ending at it',
      request: { params: item },
      handler: ({ principal, params }) => regenerateItem(deps.conversations, principal.userId, params.conversationId, params.itemId),
    }),

    // --- branches ---
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations/:conversationId/branches',
      summary: 'List the branches of a conversation, oldest first (`limit`/`offset`; all of them without `limit`)',
      request: { params: conversation, query: pageQuery() },
      handler: ({ principal, params, query }) => listConversationBranches(deps.conversations, principal.userId, params.conversationId, query),
    }),
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations/:conversationId/branches',
      summary: 'Create a branch from another branch, optionally up to an item',
      request: { params: conversation, body: createBranchSchema },
      response: { status: 201 },
      handler: ({ principal, params, body }) => createBranch(deps.conversations, principal.userId, params.conversationId, body),
    }),
    route({
      ...common,
      method: 'get',
      path: '/v1/conversations/:conversationId/branches/:branch',
      summary: 'Get a branch',
      request: { params: branch },
      handler: ({ principal, params }) => getBranch(deps.conversations, principal.userId, params.conversationId, params.branch),
    }),
    route({
      ...common,
      method: 'delete',
      path: '/v1/conversations/:conversationId/branches/:branch',
      summary: 'Delete a branch; items no other branch references are erased',
      request: { params: branch },
      handler: ({ principal, params }) => removeBranch(deps.conversations, principal.userId, params.conversationId, params.branch),
    }),
    route({
      ...common,
      method: 'post',
      path: '/v1/conversations/:conversationId/branches/:branch/activate',
      summary: 'Make a branch the active one',
      request: { params: branch },
      handler: ({ principal, params }) => activateBranch(deps.conversations, principal.userId, params.conversationId, params.branch),
    }),
  ];
}
