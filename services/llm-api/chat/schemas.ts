import { z } from 'zod';
import { badRequest, conversationRefSchema, IMAGE_DETAILS, requestMetadataSchema } from '../../kit/index.js';

/**
 * POST /v1/chat/completions request (SPEC.md 4.2, openai-api.md 1.1). Objects are loose: fields the
 * upstream understands and this schema does not name (`min_p`, `guided_json`, …) pass through.
 */

const num = (min: number, max: number) => z.number().min(min).max(max).nullable().optional();
const int = (min: number, max: number) => z.number().int().min(min).max(max).nullable().optional();

/**
 * A content part: the kinds OpenAI defines are checked field by field as OpenAI does (a wrong type or
 * a missing field is a 400 naming its path, `messages[0].content[0].image_url.url`); a kind the
 * platform does not know (vLLM's `video_url`, …) passes to the provider as it came. One hand-written
 * check per part, built once with the schema: nothing is built per request, string content is never
 * walked, and no part is copied or rewritten (the forwarded bytes stay what was validated).
 */
const contentPart = z.looseObject({ type: z.string().min(1) }).superRefine((part, ctx) => checkContentPart(part, ctx));

type PartContext = { addIssue(issue: z.core.$ZodRawIssue): void };
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function checkContentPart(part: Record<string, unknown> & { type: string }, ctx: PartContext): void {
  switch (part.type) {
    case 'text':
      return requireString(part, 'text', ctx, []);
    case 'refusal':
      return requireString(part, 'refusal', ctx, []);
    case 'image_url': {
      const image = requireObject(part, 'image_url', ctx);
      if (!image) return;
      requireString(image, 'url', ctx, ['image_url']);
      const detail = image.detail;
      if (detail !== undefined && (typeof detail !== 'string' || !IMAGE_DETAILS.has(detail))) {
        ctx.addIssue({ code: 'invalid_value', values: [...IMAGE_DETAILS], input: detail, path: ['image_url', 'detail'], message: "expected one of 'auto', 'low', 'high'" });
      }
      return;
    }
    case 'input_audio': {
      const audio = requireObject(part, 'input_audio', ctx);
      if (!audio) return;
      requireString(audio, 'data', ctx, ['input_audio']);
      requireString(audio, 'format', ctx, ['input_audio']);
      return;
    }
    case 'file': {
      const file = requireObject(part, 'file', ctx);
      if (!file) return;
      for (const key of ['file_id', 'file_data', 'filename'] as const) {
        if (file[key] !== undefined && typeof file[key] !== 'string') ctx.addIssue({ code: 'invalid_type', expected: 'string', input: file[key], path: ['file', key], message: 'expected a string' });
      }
      if (file.file_id === undefined && file.file_data === undefined) ctx.addIssue({ code: 'custom', input: file, path: ['file'], message: 'a file part needs file_id or file_data' });
      return;
    }
    default:
      return;
  }
}

function requireString(holder: Record<string, unknown>, key: string, ctx: PartContext, at: PropertyKey[]): void {
  if (typeof holder[key] !== 'string') ctx.addIssue({ code: 'invalid_type', expected: 'string', input: holder[key], path: [...at, key], message: 'expected a string' });
}

function requireObject(part: Record<string, unknown>, key: string, ctx: PartContext): Record<string, unknown> | null {
  const value = part[key];
  if (isObject(value)) return value;
  ctx.addIssue({ code: 'invalid_type', expected: 'object', input: value, path: [key], message: 'expected an object' });
  return null;
}

/**
 * A tool call of an assistant message: a function call (`function`), or, with `type: 'custom'`, a
 * call of a custom tool (`custom`: name and input), as the SDK's `ChatCompletionMessageToolCall` has them.
 */
const toolCall = z
  .looseObject({
    id: z.string().optional(),
    type: z.string().optional(),
    function: z.looseObject({ name: z.string(), arguments: z.string() }).optional(),
    custom: z.looseObject({ name: z.string(), input: z.string() }).optional(),
  })
  .superRefine((call, ctx) => {
    const key = call.type === 'custom' ? 'custom' : 'function';
    if (call[key] === undefined) ctx.addIssue({ code: 'invalid_type', expected: 'object', input: undefined, path: [key], message: `expected an object (${key} tool calls need ${key})` });
  });

const message = z
  .looseObject({
    role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
    content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
    name: z.string().max(256).optional(),
    tool_calls: z.array(toolCall).optional(),
    tool_call_id: z.string().optional(),
  })
  .superRefine((m, ctx) => {
    if (m.role === 'tool' && !m.tool_call_id) ctx.addIssue({ code: 'custom', path: ['tool_call_id'], message: "messages with role 'tool' need tool_call_id" });
    if ((m.role === 'user' || m.role === 'system' || m.role === 'developer' || m.role === 'tool') && (m.content === undefined || m.content === null)) {
      ctx.addIssue({ code: 'custom', path: ['content'], message: `messages with role '${m.role}' need content` });
    }
    // OpenAI refuses an empty parts array where content is required; an assistant turn of tool calls may send one.
    if (m.role !== 'assistant' && Array.isArray(m.content) && m.content.length === 0) {
      ctx.addIssue({ code: 'too_small', origin: 'array', minimum: 1, inclusive: true, input: m.content, path: ['content'], message: 'expected at least one content part' });
    }
    // An earlier audio answer is replayed by its id alone (`audio: {id}`), as OpenAI takes it.
    if (m.role === 'assistant' && (m.content === undefined || m.content === null) && !m.tool_calls && !m.function_call && !m.audio) {
      ctx.addIssue({ code: 'custom', path: ['content'], message: "assistant messages need content, tool_calls or audio" });
    }
  });

const functionDef = z.looseObject({
  name: z.string().regex(/^[a-zA-Z0-9_.-]{1,64}$/, 'letters, digits, _ . - only, at most 64'),
  description: z.string().optional(),
  // A JSON Schema of any shape, for the provider: checked as an object only. `z.record` checked every
  // key and value of it again, a third of the validation of a request with 30 tools.
  parameters: z.looseObject({}).optional(),
  strict: z.boolean().nullable().optional(),
});

const tool = z.looseObject({ type: z.string().min(1), function: functionDef.optional() }).superRefine((t, ctx) => {
  if (t.type === 'function' && !t.function) ctx.addIssue({ code: 'custom', path: ['function'], message: 'function tools need a function' });
});

const level = z.enum(['low', 'medium', 'high']);
/** Every level the official SDK's `ReasoningEffort` lists; passed to the provider as sent. */
const reasoningEffort = z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']);

export const chatRequestSchema = z.looseObject({
  model: z.string().min(1).max(300),
  messages: z.array(message).min(1, 'must contain at least one message'),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).nullable().optional(),
  store: z.boolean().nullable().optional(),
  store_reasoning: z.boolean().nullable().optional(),
  conversation: conversationRefSchema,
  metadata: requestMetadataSchema,
  temperature: num(0, 2),
  top_p: num(0, 1),
  frequency_penalty: num(-2, 2),
  presence_penalty: num(-2, 2),
  repetition_penalty: z.number().gt(0).max(10).nullable().optional(),
  top_k: int(-1, 1_000_000),
  n: int(1, 128),
  seed: z.number().int().nullable().optional(),
  max_completion_tokens: int(1, 10_000_000),
  max_tokens: int(1, 10_000_000),
  stop: z.union([z.string(), z.array(z.string()).min(1).max(4)]).nullable().optional(),
  logit_bias: z
    .record(z.string().regex(/^\d+$/, 'keys are token ids (integer strings)'), z.number().min(-100).max(100))
    .nullable()
    .optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: int(0, 20),
  tools: z.array(tool).max(128).nullable().optional(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string(), function: z.looseObject({ name: z.string() }).optional() })])
    .nullable()
    .optional(),
  functions: z.array(functionDef).max(128).nullable().optional(),
  function_call: z.union([z.enum(['none', 'auto']), z.looseObject({ name: z.string() })]).nullable().optional(),
  parallel_tool_calls: z.boolean().optional(),
  response_format: z
    .looseObject({ type: z.enum(['text', 'json_object', 'json_schema']), json_schema: z.looseObject({ name: z.string().min(1) }).optional() })
    .superRefine((format, ctx) => {
      if (format.type === 'json_schema' && format.json_schema === undefined) ctx.addIssue({ code: 'invalid_type', expected: 'object', input: undefined, path: ['json_schema'], message: "response_format of type 'json_schema' needs json_schema" });
    })
    .nullable()
    .optional(),
  prediction: z.looseObject({ type: z.string() }).nullable().optional(),
  reasoning_effort: reasoningEffort.nullable().optional(),
  verbosity: level.nullable().optional(),
  service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority']).nullable().optional(),
  safety_identifier: z.string().max(512).nullable().optional(),
  user: z.string().max(512).optional(),
  guided_choice: z.array(z.string()).min(1).nullable().optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullable().optional(),
  enable_thinking: z.boolean().nullable().optional(),
  deep_research: z.boolean().nullable().optional(),
});

export type ChatRequest = z.infer<typeof chatRequestSchema>;

/** Rules between fields, with the live API's wording (openai-api.md 1.5). */
export function checkCrossFieldRules(input: ChatRequest): void {
  if (input.top_logprobs !== undefined && input.top_logprobs !== null && input.logprobs !== true) {
    throw badRequest("The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled.", 'top_logprobs');
  }
  if (input.stream_options && input.stream !== true) {
    throw badRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options');
  }
  if (input.deep_research) {
    // Deep research runs as a Responses request, whose `max_output_tokens` starts at 16.
    const field = typeof input.max_completion_tokens === 'number' ? 'max_completion_tokens' : 'max_tokens';
    const cap = input[field];
    if (typeof cap === 'number' && cap < DEEP_RESEARCH_MIN_OUTPUT_TOKENS) {
      throw badRequest(`'${field}' must be at least ${DEEP_RESEARCH_MIN_OUTPUT_TOKENS} with deep_research.`, field);
    }
  }
}

/** The smallest output-token cap a deep-research run takes (the Responses API's minimum of `max_output_tokens`). */
export const DEEP_RESEARCH_MIN_OUTPUT_TOKENS = 16;

/** Fields the gateway consumes; they never reach the provider. */
const GATEWAY_FIELDS = ['store', 'store_reasoning', 'conversation', 'metadata', 'enable_thinking', 'deep_research'] as const;

/**
 * The body sent upstream: gateway fields removed, deprecated fields mapped (max_tokens →
 * max_completion_tokens, functions → tools, function_call → tool_choice), usage always asked for
 * on streams (captured for accounting; the usage chunk is dropped again unless the client asked).
 */
/**
 * The members `upstreamBody` passes on as the request gave them, unless a step replaced them (a
 * conversation's history, media references): the chat route keeps their bytes, and a provider's
 * body carries those bytes instead of serialising the parsed value again (`encodeWithRawMembers`).
 * Their schemas transform nothing, so the bytes and the validated value say the same.
 */
export const FORWARDED_MEMBERS = ['messages', 'tools'] as const;

export function upstreamBody(input: ChatRequest, options: { upstreamModel: string; disableThinking: boolean }): Record<string, unknown> {
  const body: Record<string, unknown> = { ...input };
  for (const field of GATEWAY_FIELDS) delete body[field];
  body.model = options.upstreamModel;
  if (input.max_tokens !== undefined) {
    if (input.max_completion_tokens === undefined || input.max_completion_tokens === null) body.max_completion_tokens = input.max_tokens;
    delete body.max_tokens;
  }
  if (input.functions !== undefined) {
    if (!input.tools && input.functions) body.tools = input.functions.map((f) => ({ type: 'function', function: f }));
    delete body.functions;
  }
  if (input.function_call !== undefined) {
    if (!input.tool_choice && input.function_call) {
      body.tool_choice = typeof input.function_call === 'string' ? input.function_call : { type: 'function', function: { name: input.function_call.name } };
    }
    delete body.function_call;
  }
  if (input.stream) body.stream_options = { ...(input.stream_options ?? {}), include_usage: true };
  if (options.disableThinking) body.chat_template_kwargs = { ...(input.chat_template_kwargs ?? {}), enable_thinking: false };
  return body;
}

/**
 * The answer, for the API document (the gateway does not validate upstream answers against it;
 * types.ts names the fields the code reads). Streams carry `chat.completion.chunk` objects as
 * server-sent events instead, ending with `data: [DONE]`.
 */
const usageSchema = z.looseObject({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
});

export const chatCompletionSchema = z.looseObject({
  id: z.string(),
  object: z.literal('chat.completion'),
  created: z.number().int().describe('Unix seconds'),
  model: z.string(),
  choices: z.array(
    z.looseObject({
      index: z.number().int(),
      message: z.looseObject({
        role: z.string(),
        content: z.string().nullable(),
        refusal: z.string().nullable(),
        tool_calls: z.array(toolCall).optional(),
      }),
      finish_reason: z.string().nullable(),
      logprobs: z.unknown(),
    }),
  ),
  usage: usageSchema.nullable().optional(),
  conversation: z.object({ id: z.string(), title: z.string().nullable() }).optional().describe('Set when the request named or created a conversation'),
});
