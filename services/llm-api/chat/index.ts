import { parseSize } from '../../kit/index.js';
import type { LlmApiResource } from '../resource.js';
import { llmCore } from '../routing/core.js';
import { usageTables } from '../usage/migrations.js';
import { mountChatRoutes } from './routes.js';
import { createStoreHooks } from './store-hooks.js';

function chatBodyLimit(value: string | undefined): number {
  return value && /^\d+(b|kb|mb)$/i.test(value) ? parseSize(value) : parseSize('10mb');
}

/** Chat completions (OpenAI-compatible, SSE streaming) and usage accounting. */
export const chatResource: LlmApiResource = {
  name: 'chat',
  migrations: [usageTables],
  // Body rules are static (read before any config is loaded); config.ts validates the same variable at start.
  bodyRules: [{ path: /^\/v1\/chat\/completions$/, limit: chatBodyLimit(process.env.LLM_CHAT_BODY_LIMIT) }],
  async mount(router, ctx) {
    mountChatRoutes(router, await llmCore(ctx), createStoreHooks(ctx));
  },
};
