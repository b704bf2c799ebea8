import type { Router } from 'express';
import { parseInput } from '../../kit/index.js';
import type { LlmCore } from '../routing/core.js';
import { createChatCompletion, type StoreHooks } from './completions.js';
import { chatRequestSchema, checkCrossFieldRules } from './schemas.js';

export function mountChatRoutes(router: Router, core: LlmCore, hooks?: StoreHooks): void {
  router.post('/v1/chat/completions', async (req, res) => {
    const input = parseInput(chatRequestSchema, req.body);
    checkCrossFieldRules(input);
    await createChatCompletion(core, req, res, input, hooks);
  });
}
