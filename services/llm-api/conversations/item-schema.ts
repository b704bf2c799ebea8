import { z } from 'zod';
import { badRequest, parseInput } from '../../kit/index.js';

/**
 * Validation and normalisation of conversation items (SPEC.md 2.3). Both the OpenAI SDK's shapes
 * (flat parts such as `{type:"input_text", text}`, string content, `function_call` /
 * `function_call_output` items) and SPEC.md's (nested parts such as `{type:"output_text",
 * output_text:{text, annotations, logprobs}}`, `tool_call` / `tool_response` items) are accepted.
 * Everything a client sends is kept as given, except the fields the server owns
 * (`id`, `object`, `branch`, `created_at`, `sequence_number`).
 */

export const ITEM_TYPES = [
  'message',
  'tool_call',
  'tool_response',
  'function_call',
  'function_call_output',
  'reasoning',
  'file_search_call',
  'web_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'mcp_list_tools',
  'mcp_call',
  'mcp_approval_request',
  'mcp_approval_response',
  'custom_tool_call',
  'custom_tool_call_output',
  'tool_search_call',
  'tool_search_output',
  'additional_tools',
  'compaction',
  'program',
  'program_output',
] as const;

export const ROLES = ['user', 'assistant', 'system', 'developer', 'tool'] as const;

/** Fields the server assigns; a client's values for them are ignored. */
export const SERVER_FIELDS = ['id', 'object', 'branch', 'created_at', 'sequence_number'] as const;

const str = z.string();
const int = z.number().int();
const xy = z.looseObject({ x: int.optional(), y: int.optional() });
const annotation = z.looseObject({
  type: str.optional(),
  text: str.optional(),
  quote: str.optional(),
  url: str.optional(),
  file_id: str.optional(),
  filename: str.optional(),
  container_id: str.optional(),
  index: int.optional(),
  start_index: int.optional(),
  end_index: int.optional(),
  page_number: int.optional(),
  confidence: z.number().optional(),
  bounding_box: z.looseObject({ x: z.number(), y: z.number(), width: z.number(), height: z.number() }).partial().optional(),
});
const topLogprob = z.looseObject({ token: str, logprob: z.number(), bytes: z.array(int).nullable().optional() });
const logprob = topLogprob.extend({ top_logprobs: z.array(topLogprob).optional() });
const fnCall = z.looseObject({ id: str.optional(), name: str.optional(), arguments: str.optional() });

/** One content part: every SPEC.md key optional and typed; OpenAI's flat parts pass through. */
export const contentPartSchema = z
  .looseObject({
    type: str.min(1).max(64).optional(),
    text: str.optional(),
    finish_reason: str.optional(),
    refusal: str.optional(),
    summary_text: str.optional(),
    thinking: str.optional(),
    tool_call_id: str.optional(),
    audio: z.looseObject({ id: str.optional(), data: str.optional(), format: str.optional(), transcript: str.optional() }).optional(),
    input_audio: z.looseObject({ data: str.optional(), format: str.optional(), transcript: str.optional() }).optional(),
    code: z
      .looseObject({
        code: str.optional(),
        error: str.optional(),
        execution_id: str.optional(),
        language: str.optional(),
        output: str.optional(),
        exit_code: int.optional(),
        metadata: z.record(str, z.unknown()).optional(),
      })
      .optional(),
    computer_action: z
      .looseObject({
        action: str.optional(),
        key: str.optional(),
        text: str.optional(),
        coordinates: xy.optional(),
        scroll_delta: xy.optional(),
        metadata: z.record(str, z.unknown()).optional(),
      })
      .optional(),
    computer_screenshot: z
      .looseObject({
        description: str.optional(),
        image_data: str.optional(),
        image_url: str.optional(),
        height: int.optional(),
        width: int.optional(),
        timestamp: int.optional(),
      })
      .optional(),
    file: z.looseObject({ file_id: str.optional(), mime_type: str.optional(), name: str.optional(), size: int.optional() }).optional(),
    function_call: fnCall.optional(),
    function_call_output: z.looseObject({ call_id: str.optional(), output: str.optional() }).optional(),
    image: z.looseObject({ detail: str.optional(), file_id: str.optional(), url: str.optional() }).optional(),
    output_text: z
      .looseObject({ text: str, annotations: z.array(annotation).optional(), logprobs: z.array(logprob).optional() })
      .optional(),
    annotations: z.array(annotation).optional(),
    logprobs: z.array(logprob).optional(),
    tool_calls: z.array(z.looseObject({ id: str.optional(), type: str.optional(), function: fnCall.optional() })).optional(),
  })
  .superRefine((part, ctx) => {
    const keys = Object.keys(part);
    if (keys.length === 0) ctx.addIssue({ code: 'custom', message: 'a content part must not be empty' });
    else if (part.type === undefined && !keys.some((k) => k in NESTED_KINDS)) {
      ctx.addIssue({ code: 'custom', message: 'a content part needs a type or one content key', path: ['type'] });
    }
    const needsText = part.type === 'input_text' || part.type === 'text' || (part.type === 'output_text' && part.output_text === undefined);
    if (needsText && typeof part.text !== 'string') ctx.addIssue({ code: 'custom', message: `a ${part.type} part needs a text string`, path: ['text'] });
    if (part.type === 'refusal' && typeof part.refusal !== 'string') ctx.addIssue({ code: 'custom', message: 'a refusal part needs a refusal string', path: ['refusal'] });
  });

const NESTED_KINDS: Record<string, true> = Object.fromEntries(
  [
    'finish_reason', 'refusal', 'summary_text', 'thinking', 'tool_call_id', 'audio', 'input_audio', 'code', 'computer_action',
    'computer_screenshot', 'file', 'function_call', 'function_call_output', 'image', 'output_text', 'tool_calls', 'text',
  ].map((k) => [k, true]),
);

const safetyCheck = z.looseObject({ reason: str.nullish(), type: str.nullish(), id: str.nullish(), code: str.nullish(), message: str.nullish() });
const contentArray = z.array(contentPartSchema).max(1000);

/**
 * Top-level fields of SPEC.md 2.3, typed where present. Where the openai SDK's item types allow
 * `null` for an optional field (`status`, `output`, `call_id`, `reason`, `approval_request_id`,
 * `max_output_length`, safety checks' `code` and `message`, an MCP tool's `description`), `null`
 * is taken as the SDK sends it; a `null` status is stored as the default, `completed`.
 */
const itemBase = z.looseObject({
  type: z.enum(ITEM_TYPES, { error: `must be one of ${ITEM_TYPES.join(', ')}` }),
  role: z.enum(ROLES, { error: `must be one of ${ROLES.join(', ')}` }).optional(),
  status: str.min(1).max(64).nullish(),
  name: str.optional(),
  call_id: str.nullish(),
  arguments: str.optional(),
  // A string or parts; a `computer_call_output`'s is an object (a `computer_screenshot`).
  output: z.union([str, z.array(z.unknown()), z.record(str, z.unknown())]).nullish(),
  error: z.union([str, z.null()]).optional(),
  reason: str.nullish(),
  server_label: str.optional(),
  completed_at: str.optional(),
  incomplete_at: str.optional(),
  rated_at: str.optional(),
  // A string is the easy form of one text part; anything else must be an array of parts.
  content: z.preprocess((v) => (typeof v === 'string' ? [{ type: 'input_text', text: v }] : v), contentArray).optional(),
  acknowledged_safety_checks: z.array(safetyCheck).nullish(),
  pending_safety_checks: z.array(safetyCheck).optional(),
  action: z.record(str, z.unknown()).optional(),
  operation: z.record(str, z.unknown()).optional(),
  approval_request_id: str.nullish(),
  approve: z.boolean().optional(),
  commands: z.array(str).optional(),
  incomplete_details: z.looseObject({ error: str.optional(), reason: str.optional() }).nullable().optional(),
  max_output_length: int.nullish(),
  rating: str.max(32).optional(),
  rating_comment: str.max(4096).optional(),
  shell_outputs: z.array(z.looseObject({ type: str, value: str })).optional(),
  tools: z.array(z.looseObject({ name: str, description: str.nullish(), input_schema: z.unknown().optional(), annotations: z.unknown().optional() })).optional(),
});

const withContent = (what: string) =>
  itemBase.superRefine((item, ctx) => {
    if (item.content === undefined) ctx.addIssue({ code: 'custom', message: `a ${what} item needs content`, path: ['content'] });
    else if (item.content.length === 0) ctx.addIssue({ code: 'custom', message: 'content must not be empty', path: ['content'] });
  });

/** Fields that say what an item is or how it stands, not what it holds. */
const FRAME_FIELDS = new Set<string>(['type', 'role', 'status', ...SERVER_FIELDS]);

/**
 * Every item needs content (SPEC.md 4.3). Types without a rule of their own (`reasoning`,
 * `mcp_call`, `web_search_call`, …) hold it in different fields, so they need at least one field
 * besides their type and status: `{"type":"reasoning"}` alone is a 400 naming `content`.
 */
const withSubstance = itemBase.superRefine((item, ctx) => {
  for (const key in item) if (!FRAME_FIELDS.has(key) && (item as Record<string, unknown>)[key] !== undefined) return;
  ctx.addIssue({ code: 'custom', message: `a ${item.type} item needs content: at least one field besides its type and status`, path: ['content'] });
});

const SCHEMAS: Partial<Record<(typeof ITEM_TYPES)[number], z.ZodType>> = {
  message: withContent('message').superRefine((item, ctx) => {
    if (item.role === undefined) ctx.addIssue({ code: 'custom', message: 'a message needs a role', path: ['role'] });
  }),
  tool_call: withContent('tool_call'),
  tool_response: withContent('tool_response'),
  function_call: itemBase.extend({ name: str.min(1), arguments: str, call_id: str.min(1) }),
  function_call_output: itemBase.extend({ call_id: str.min(1), output: z.union([str, z.array(z.unknown())]) }),
  // The openai SDK's tool search items: the call's `arguments` are an object, the output's `tools`
  // are tool definitions (not MCP tools with a `name`).
  tool_search_call: itemBase.extend({ arguments: z.unknown() }).superRefine((item, ctx) => {
    if (item.arguments === undefined || item.arguments === null) ctx.addIssue({ code: 'custom', message: 'a tool_search_call needs arguments', path: ['arguments'] });
  }),
  tool_search_output: itemBase.extend({ tools: z.array(z.unknown()) }),
  // Tools given to the model mid-conversation: the SDK sends them as the developer's.
  additional_tools: itemBase.extend({ role: z.literal('developer', { error: "must be 'developer'" }).optional(), tools: z.array(z.unknown()) }),
  compaction: itemBase.extend({ encrypted_content: str }),
};

export type StoredItemBody = Record<string, unknown> & { type: string; role?: string; status: string; content?: unknown[] };

/**
 * Validates one raw item; throws a 400 naming `<root>[index].<field>`. Returns the body to store:
 * string content becomes one text part (`input_text`, or `output_text` for assistant messages),
 * a message without a type is a `message`, status defaults to `completed`.
 */
export function normalizeItem(raw: unknown, param?: string): StoredItemBody {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw badRequest(`Invalid value for '${param ?? 'item'}': an item must be an object.`, param);
  const input = { ...(raw as Record<string, unknown>) };
  if (input.type === undefined && input.role !== undefined) input.type = 'message';
  const type = parseInput(z.looseObject({ type: itemBase.shape.type }), input, param).type;
  const parsed = parseInput(SCHEMAS[type] ?? withSubstance, input, param) as Record<string, unknown>;
  const body: Record<string, unknown> = { ...input };
  for (const key of SERVER_FIELDS) delete body[key];
  if (typeof input.content === 'string') {
    body.content = parsed.role === 'assistant' ? [{ type: 'output_text', text: input.content, annotations: [] }] : [{ type: 'input_text', text: input.content }];
  }
  body.status = typeof body.status === 'string' ? body.status : 'completed';
  return body as StoredItemBody;
}

/** Message content for edits: a string or parts, validated like an item's content. */
export function normalizeContent(raw: unknown, role: string): unknown[] {
  const item = normalizeItem({ type: 'message', role, content: raw });
  return item.content as unknown[];
}
