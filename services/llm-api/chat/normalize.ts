import { completionId } from '../../kit/core/index.js';
import type { ChatCompletion } from './types.js';

/**
 * Makes an upstream non-stream answer the chat-completion object the official SDK expects
 * (openai-api.md 1.2): `object`, integer `created`, every choice with `logprobs` and
 * `finish_reason`, every message with `content` and `refusal` keys, and usage totals that add up.
 */
export function normalizeCompletion(body: ChatCompletion, fallbackModel: string, nowSec: number): ChatCompletion {
  body.id ??= completionId();
  body.object = 'chat.completion';
  body.created = Number.isInteger(body.created) ? body.created : nowSec;
  body.model ??= fallbackModel;
  if (!Array.isArray(body.choices)) body.choices = [];
  body.choices.forEach((choice, i) => {
    choice.index ??= i;
    if (!Object.hasOwn(choice, 'logprobs')) choice.logprobs = null;
    choice.finish_reason ??= 'stop';
    const message = (choice.message ??= { role: 'assistant', content: null });
    message.role ??= 'assistant';
    if (!Object.hasOwn(message, 'content')) message.content = null;
    if (!Object.hasOwn(message, 'refusal')) message.refusal = null;
  });
  if (body.usage && typeof body.usage === 'object') {
    const u = body.usage;
    u.prompt_tokens = Number(u.prompt_tokens) || 0;
    u.completion_tokens = Number(u.completion_tokens) || 0;
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
  }
  return body;
}
