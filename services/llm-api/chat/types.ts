/**
 * The OpenAI chat-completion objects as the gateway reads and writes them. Only the fields the
 * gateway looks at are named; everything else an upstream sends passes through untouched (the index
 * signatures), so a provider's extra fields (`reasoning_content`, `service_tier`, …) reach clients.
 */

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details?: { reasoning_tokens?: number; [field: string]: unknown };
  [field: string]: unknown;
}

export interface AssistantMessage {
  role: string;
  content: string | null;
  refusal?: string | null;
  reasoning_content?: string;
  reasoning?: string;
  [field: string]: unknown;
}

export interface CompletionChoice {
  index: number;
  message: AssistantMessage;
  finish_reason: string | null;
  logprobs: unknown;
  [field: string]: unknown;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: CompletionChoice[];
  usage?: Usage | null;
  /** Set by the gateway when the request named or created a conversation. */
  conversation?: ConversationRef;
  [field: string]: unknown;
}

export interface ChunkDelta {
  role?: string;
  content?: string | null;
  reasoning_content?: string | null;
  reasoning?: string | null;
  [field: string]: unknown;
}

export interface ChunkChoice {
  index?: number;
  delta?: ChunkDelta;
  finish_reason?: string | null;
  [field: string]: unknown;
}

export interface ChatCompletionChunk {
  id?: string;
  object?: string;
  choices?: ChunkChoice[];
  usage?: Usage | null;
  conversation?: ConversationRef;
  [field: string]: unknown;
}

/**
 * A tool call of an answer, as `store: true` keeps it (a `function_call` item, or a
 * `custom_tool_call` item for a custom tool's call) and replays it.
 */
export interface AnswerToolCall {
  id: string;
  name: string;
  /** A function's arguments, or (`custom`) the custom tool's free-form input. */
  arguments: string;
  /** A custom tool's call (`type: 'custom'`, `custom: {name, input}`), not a function's. */
  custom?: boolean;
}

export interface ConversationRef {
  id: string;
  title: string | null;
}

/** The `error` member of an answer in the platform's error shape (type, code, message, param, request_id). */
export interface ErrorPayload {
  type: string;
  code: string;
  message: string;
  param: string | null;
  request_id?: string;
}
