import { ApiError, completionId } from '../../kit/core/index.js';
import { cleanUsage, type InvalidCountLog } from '../usage/token-counts.js';
import type { ChatCompletion, CompletionChoice } from './types.js';

/**
 * Makes an upstream non-stream answer the chat-completion object the official SDK expects
 * (openai-api.md 1.2): `object`, integer `created`, every choice with `logprobs` and
 * `finish_reason`, every message with `content` and `refusal` keys, and usage totals that add up
 * (counts that are not non-negative integers become 0, logged to `log` with `requestId`).
 *
 * An answer that is not shaped like a chat completion (`choices` not an array, a choice or its
 * message not an object, `usage` neither an object nor null) is the provider's fault: a 502, as an
 * answer that is not JSON at all is (`readAnswer`), never a 500 that the SDK would retry and a
 * provider bill again, nor a 200 that hides it. Type checks only, on the few members read here:
 * the rest of the answer passes through as it came.
 */
export function normalizeCompletion(body: ChatCompletion, fallbackModel: string, nowSec: number, log?: InvalidCountLog, requestId?: string): ChatCompletion {
  const choices: unknown = body.choices;
  if (!Array.isArray(choices)) throw malformedAnswer('choices is not an array');
  const usage: unknown = body.usage;
  if (usage !== undefined && usage !== null && !isPlainObject(usage)) throw malformedAnswer('usage is not an object');
  for (let i = 0; i < choices.length; i++) {
    const choice: unknown = choices[i];
    if (!isPlainObject(choice)) throw malformedAnswer(`choices[${i}] is not an object`);
    const message: unknown = choice.message;
    if (message !== undefined && message !== null && !isPlainObject(message)) throw malformedAnswer(`choices[${i}].message is not an object`);
  }
  body.id ??= completionId();
  body.object = 'chat.completion';
  body.created = Number.isInteger(body.created) ? body.created : nowSec;
  body.model ??= fallbackModel;
  for (let i = 0; i < body.choices.length; i++) {
    const choice: CompletionChoice = body.choices[i]!;
    choice.index ??= i;
    if (!Object.hasOwn(choice, 'logprobs')) choice.logprobs = null;
    choice.finish_reason ??= 'stop';
    const message = (choice.message ??= { role: 'assistant', content: null });
    message.role ??= 'assistant';
    if (!Object.hasOwn(message, 'content')) message.content = null;
    if (!Object.hasOwn(message, 'refusal')) message.refusal = null;
  }
  if (body.usage) cleanUsage(body.usage, log, requestId);
  return body;
}

export const isPlainObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The 502 of an answer whose shape is wrong; `what` (ours, never the provider's text) goes to the log through the cause. */
const malformedAnswer = (what: string) => new ApiError(502, 'The model provider answered with a malformed body', { cause: new Error(what) });
