import { randomUUID } from 'node:crypto';

/**
 * Makes an upstream non-stream answer the chat-completion object the official SDK expects
 * (openai-api.md 1.2): `object`, integer `created`, every choice with `logprobs` and
 * `finish_reason`, every message with `content` and `refusal` keys, and usage totals that add up.
 */
export function normalizeCompletion(body: Record<string, any>, fallbackModel: string, nowSec: number): Record<string, any> {
  body.id ??= `chatcmpl-${randomUUID()}`;
  body.object = 'chat.completion';
  body.created = Number.isInteger(body.created) ? body.created : nowSec;
  body.model ??= fallbackModel;
  if (!Array.isArray(body.choices)) body.choices = [];
  body.choices.forEach((choice: Record<string, any>, i: number) => {
    choice.index ??= i;
    if (!('logprobs' in choice)) choice.logprobs = null;
    choice.finish_reason ??= 'stop';
    const message = (choice.message ??= { role: 'assistant' });
    message.role ??= 'assistant';
    if (!('content' in message)) message.content = null;
    if (!('refusal' in message)) message.refusal = null;
  });
  if (body.usage && typeof body.usage === 'object') {
    const u = body.usage;
    u.prompt_tokens = Number(u.prompt_tokens) || 0;
    u.completion_tokens = Number(u.completion_tokens) || 0;
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
  }
  return body;
}
