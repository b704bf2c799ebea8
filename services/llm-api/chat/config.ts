import { z } from 'zod';
import { bool, loadConfig, parseSize } from '../../kit/index.js';

/**
 * The chat path's own limits (read once at mount with the kit's `loadConfig` from the platform's
 * environment). They bound what one upstream answer may cost the gateway: a provider that sends an
 * endless event, a huge answer or a huge error body, or a stream that drips forever, is cut and the
 * client gets a clear error.
 */
const size = (fallback: string) => z.string().regex(/^\d+(b|kb|mb)$/i, 'a size such as 1mb').default(fallback);

export const chatConfigShape = {
  /** Largest single server-sent event from a provider (a stream with a larger one is cut). */
  LLM_SSE_MAX_EVENT_BYTES: size('1mb'),
  /** Largest non-stream answer read from a provider (larger: 502). */
  LLM_MAX_RESPONSE_BYTES: size('16mb'),
  /** How much of a provider's error body is read (for the logs and the 400 mapping; the rest is cut). */
  LLM_UPSTREAM_ERROR_MAX_BYTES: size('64kb'),
  /** Overall time limit of one completion from dispatch to the last byte, streams included. */
  LLM_COMPLETION_MAX_DURATION_MS: z.coerce.number().int().min(1).default(1_800_000),
  /** Log every chat request's messages (prompt text, possibly personal data). Off by default; for debugging only. */
  LOG_PROMPTS: bool(false),
};

export interface ChatLimits {
  maxEventBytes: number;
  maxResponseBytes: number;
  errorBodyMaxBytes: number;
  maxDurationMs: number;
}

export const defaultChatLimits: ChatLimits = limitsFrom(loadConfig(chatConfigShape, {}));

export function loadChatLimits(env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): ChatLimits {
  return limitsFrom(loadConfig(chatConfigShape, env as NodeJS.ProcessEnv));
}

function limitsFrom(config: z.infer<z.ZodObject<typeof chatConfigShape>>): ChatLimits {
  return {
    maxEventBytes: parseSize(config.LLM_SSE_MAX_EVENT_BYTES),
    maxResponseBytes: parseSize(config.LLM_MAX_RESPONSE_BYTES),
    errorBodyMaxBytes: parseSize(config.LLM_UPSTREAM_ERROR_MAX_BYTES),
    maxDurationMs: config.LLM_COMPLETION_MAX_DURATION_MS,
  };
}
