import { z } from 'zod';
import { conversationRefSchema, cursorQuery, requestMetadataSchema } from '../../kit/http/index.js';

/** POST /v1/responses (the OpenAI Responses request; fields this service does not use pass through unread). */
const functionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().regex(/^[a-zA-Z0-9_.-]{1,64}$/, 'letters, digits, _ . - only, at most 64'),
  description: z.string().nullable().optional(),
  parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  strict: z.boolean().nullable().optional(),
});
/**
 * The platform runs its tools when the model calls them: no call waits for an approval, so a tool
 * asking for one (`require_approval: "always"`, or `{always: …}`) is refused rather than run unasked.
 */
const NO_APPROVAL = "the platform's tools run when the model calls them, without approval: send require_approval 'never' or leave it out";
const requireApproval = z
  .union([z.literal('never'), z.looseObject({ always: z.null({ error: NO_APPROVAL }).optional() })], { error: NO_APPROVAL })
  .nullable()
  .optional();
const toolName = z.string().min(1).max(64);
const NO_HEADERS = "the platform's tools run as the caller: leave headers out";
/**
 * The platform's own MCP tools; `allowed_tools` narrows them, as a list of names or as the SDK's
 * `McpToolFilter` (`tool_names`, `read_only`). An external `server_url` is not supported.
 */
const mcpTool = z.looseObject({
  type: z.literal('mcp'),
  server_label: z.string().min(1).max(64).optional(),
  allowed_tools: z
    .union([z.array(toolName), z.looseObject({ tool_names: z.array(toolName).nullable().optional(), read_only: z.boolean().nullable().optional() })], {
      error: 'must be a list of tool names or a filter {tool_names, read_only}',
    })
    .nullable()
    .optional(),
  server_url: z.undefined({ error: 'only the platform tools are available: leave server_url out' }).optional(),
  // An OpenAI connector is another server too; its credentials would reach no server, yet be stored
  // and echoed with the response's `tools` on every retrieve.
  connector_id: z.null({ error: 'only the platform tools are available: leave connector_id out' }).optional(),
  // A Secure MCP Tunnel reaches another server as well: taking it would run the platform's tools instead.
  tunnel_id: z.null({ error: 'only the platform tools are available: leave tunnel_id out' }).optional(),
  authorization: z.null({ error: "the platform's tools run as the caller: leave authorization out" }).optional(),
  // An empty map carries no credential (what a client building headers from nothing sends): taken, echoed as null.
  headers: z
    .looseObject({}, { error: NO_HEADERS })
    .refine((map) => Object.keys(map).length === 0, { error: NO_HEADERS })
    .nullable()
    .optional(),
  require_approval: requireApproval,
});
/**
 * A tool object is told by its `type`, so a refusal names the field of that kind that is wrong
 * (`tools[0].server_url`), not the `type` of another kind.
 */
const toolEntry = z.union([
  z.string().min(1).max(64),
  z.discriminatedUnion('type', [functionTool, mcpTool], { error: 'must be one of function, mcp (or a platform tool name)' }),
]);

const inputItem = z.looseObject({ type: z.string().optional(), role: z.string().optional() });

/**
 * `text.format`, sent to each step as chat completions' `response_format` (`json_schema` with the
 * Responses API's flat fields; `text` sends nothing). `text.verbosity` is chat completions' `verbosity`.
 */
const textFormat = z.discriminatedUnion(
  'type',
  [
    z.looseObject({ type: z.literal('text') }),
    z.looseObject({ type: z.literal('json_object') }),
    z.looseObject({
      type: z.literal('json_schema'),
      name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'letters, digits, _ and - only, at most 64'),
      schema: z.looseObject({}, { error: 'must be a JSON Schema object' }),
      description: z.string().nullable().optional(),
      strict: z.boolean().nullable().optional(),
    }),
  ],
  { error: 'must be one of text, json_object, json_schema' },
);
const level = z.enum(['low', 'medium', 'high']);
/** Every level the official SDK's `ReasoningEffort` lists (llm-api's chat completions take them all and pass them on). */
const reasoningEffort = z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']);
const textConfig = z.looseObject({ format: textFormat.nullable().optional(), verbosity: level.nullable().optional() });
/** `reasoning.effort` is chat completions' `reasoning_effort`, sent as given; `summary` is echoed only. */
const reasoningConfig = z.looseObject({
  effort: reasoningEffort.nullable().optional(),
  summary: z.enum(['auto', 'concise', 'detailed']).nullable().optional(),
});

export const createResponseSchema = z.looseObject({
  model: z.string({ error: 'model is required' }).min(1).max(300),
  input: z.union([z.string(), z.array(inputItem).max(1000)]).optional(),
  instructions: z.string().nullable().optional(),
  /** A stored prompt template (OpenAI's dashboard prompts): the platform has none, and running without it would answer another request. */
  prompt: z.null({ error: 'prompt templates are not supported by this server: send the instructions and input themselves' }).optional(),
  tools: z.array(toolEntry).max(128).nullable().optional(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string(), name: z.string().nullable().optional() })])
    .nullable()
    .optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  max_tool_calls: z.number().int().min(1).max(1000).nullable().optional(),
  max_steps: z.number().int().min(1).max(8).nullable().optional(),
  /** Platform extension: the last step (`max_steps`) offers no tool calls, so the model answers with what it has. */
  answer_on_last_step: z.boolean().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  max_output_tokens: z.number().int().min(16).max(10_000_000).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  background: z.boolean().nullable().optional(),
  store: z.boolean().nullable().optional(),
  previous_response_id: z.string().min(1).max(128).nullable().optional(),
  conversation: conversationRefSchema,
  /** `auto` drops the history's oldest items to fit the model's context window; `disabled` sends it whole. */
  truncation: z.enum(['auto', 'disabled']).nullable().optional(),
  metadata: requestMetadataSchema,
  text: textConfig.nullable().optional(),
  reasoning: reasoningConfig.nullable().optional(),
  /**
   * Echoed on the response (null when not sent), as the SDK's `Response` has them; none of them
   * changes what runs (no step is sent them, and no logprobs are returned).
   */
  user: z.string().max(512).nullable().optional(),
  safety_identifier: z.string().max(64).nullable().optional(),
  prompt_cache_key: z.string().max(512).nullable().optional(),
  service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority']).nullable().optional(),
  top_logprobs: z.number().int().min(0).max(20).nullable().optional(),
});
export type CreateResponseRequest = z.infer<typeof createResponseSchema>;
export type ToolEntry = z.infer<typeof toolEntry>;

/** The longest id an input item may carry: every id is a cursor (`after`, `before`) of `input_items`. */
export const INPUT_ITEM_ID_MAX = 128;
export const inputItemsQuery = cursorQuery({ maxIdLength: INPUT_ITEM_ID_MAX }).extend({
  before: z.string().min(1).max(INPUT_ITEM_ID_MAX).optional(),
  'include[]': z.unknown().optional(),
  include: z.unknown().optional(),
});
export const responseIdParams = z.object({ id: z.string().min(1).max(128) });
/**
 * GET /v1/responses/{id}: JSON, or with `stream=true` the events of a background response from
 * `starting_after` on (a sequence number; the events after it are sent). `include_obfuscation` is
 * accepted and has no effect: no event carries obfuscation padding.
 */
export const retrieveQuery = z.object({
  stream: z.enum(['true', 'false'], { error: 'must be true or false' }).optional(),
  starting_after: z
    .string({ error: 'must be a non-negative integer (the sequence number of the last event received)' })
    .regex(/^\d{1,9}$/, 'must be a non-negative integer (the sequence number of the last event received)')
    .transform(Number)
    .optional(),
  include_obfuscation: z.enum(['true', 'false'], { error: 'must be true or false' }).optional(),
  'include[]': z.unknown().optional(),
  include: z.unknown().optional(),
});
export type TextFormat = z.infer<typeof textFormat>;
