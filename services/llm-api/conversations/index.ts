import type { LlmApiResource } from '../resource.js';
import { conversationsMigrations } from './migrations.js';
import { mountConversationRoutes } from './routes.js';

/** Conversations, their items and branches (SPEC.md 2.2, 2.3, 4.3). */
export const conversationsResource: LlmApiResource = {
  name: 'conversations',
  migrations: conversationsMigrations,
  mount: mountConversationRoutes,
};

// The domain API other llm-api resources use (chat completions with `store: true`); see docs/conversations.md.
export { appendItems, loadHistory, type AppendItemsInput, type AppendItemsResult, type ItemObject, type TokensUsed } from './items.js';
export { createConversation, getConversation, patchConversation, toConversationObject, type ConversationObject } from './conversations.js';
