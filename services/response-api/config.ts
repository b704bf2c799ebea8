import { z } from 'zod';

/**
 * Settings of response-api only (README.md "Responses" table documents each). Parsed once at start
 * from the environment the platform was configured from.
 */
const int = (min: number, max: number, fallback: number) => z.coerce.number().int().min(min).max(max).default(fallback);

export const responsesConfigShape = {
  /** Stored responses older than this are purged. */
  RESPONSES_RETENTION_DAYS: int(1, 3650, 30),
  /** How often the purge of expired responses runs (0: never, e.g. tests that drive it by hand). */
  RESPONSES_PURGE_INTERVAL_MS: int(0, 86_400_000, 3_600_000),
  /** Longest wait for one tool call on mcp-tools; past it the model sees a timeout error as the tool's output. */
  RESPONSES_TOOL_TIMEOUT_MS: int(100, 600_000, 60_000),
  /** Longest wait for one step's chat completion from llm-api. */
  RESPONSES_STEP_TIMEOUT_MS: int(100, 1_800_000, 300_000),
  /** How often a running loop reads the cancel flag from the database (cancels sent to another process). */
  RESPONSES_CANCEL_POLL_MS: int(20, 60_000, 250),
  /**
   * How long a model's context window, read from llm-api for `truncation: "auto"` (and to check a
   * streamed or background response's model before it starts), is reused before it is read again
   * (0: read for every response).
   */
  RESPONSES_MODEL_CACHE_MS: int(0, 3_600_000, 30_000),
  /**
   * How long the platform tools' list, read from mcp-tools, is reused before it is read again
   * (0: read for every response that offers tools).
   */
  RESPONSES_TOOLS_CACHE_MS: int(0, 3_600_000, 30_000),
  /**
   * A streamed response gets a `: keep-alive` comment after this long without an event (a step
   * writing no text, a long tool call), so the edge's read timeout does not cut it (0: never).
   * As llm-api's `LLM_SSE_KEEPALIVE_MS` for chat streams.
   */
  RESPONSES_SSE_KEEPALIVE_MS: int(0, 3_600_000, 15_000),
  /**
   * How many background responses one user may have queued or running at once; creating one more is
   * a 429 `too_many_background_responses` until one ends.
   */
  RESPONSES_MAX_BACKGROUND_PER_USER: int(1, 10_000, 16),
};

export type ResponsesConfig = z.infer<z.ZodObject<typeof responsesConfigShape>>;
