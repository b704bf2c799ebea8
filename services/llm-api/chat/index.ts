import { parseSize } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';
import { llmCore, stopCores } from '../routing/core.js';
import { usageTables } from '../usage/migrations.js';
import { mountChatRoutes } from './routes.js';
import { createStoreHooks } from './store-hooks.js';

/** Chat completions (OpenAI-compatible, SSE streaming) and usage accounting. */
export const chatResource: LlmApiResource = {
  name: 'chat',
  migrations: [usageTables],
  bodyRules: [{ path: /^\/v1\/chat\/completions$/, limit: parseSize(process.env.LLM_CHAT_BODY_LIMIT || '10mb') }],
  async mount(router, ctx) {
    mountChatRoutes(router, await llmCore(ctx), createStoreHooks(ctx));
  },
  stop: stopCores,
};
