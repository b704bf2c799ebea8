import { loadConfig } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';
import { conversationsConfigShape } from './config.js';
import { conversationsMigrations } from './migrations.js';
import { startPurgeJob } from './purge.js';
import { conversationRoutes } from './routes.js';

/** Conversations, their items and branches; soft-deleted conversations are kept, or erased after CONVERSATION_PURGE_AFTER_DAYS when set. */
export const conversationsResource: LlmApiResource = {
  name: 'conversations',
  migrations: conversationsMigrations,
  routes: conversationRoutes,
  start(deps, ctx) {
    const settings = loadConfig(conversationsConfigShape, ctx.runtime.config.env);
    const job = startPurgeJob({
      knex: deps.conversations.knex,
      clock: deps.conversations.clock,
      logger: ctx.runtime.logger,
      afterDays: settings.CONVERSATION_PURGE_AFTER_DAYS,
      intervalMs: settings.CONVERSATION_PURGE_INTERVAL_MS,
    });
    ctx.onStop(() => job.stop());
  },
};

// The domain API other llm-api resources use (chat completions with `store: true`); see docs/conversations.md.
export { appendItems, openHistory, type AppendItemsInput, type HistoryItem, type AppendItemsResult, type ItemObject, type TokensUsed } from './items.js';
export { createConversation, detachProjectConversations, getConversation, patchConversation, toConversationObject, type ConversationDeps, type ConversationObject, type ProjectLookup } from './conversations.js';
export { conversationsConfigShape } from './config.js';
export { purgeDeletedConversations } from './purge.js';
