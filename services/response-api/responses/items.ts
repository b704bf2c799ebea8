import { badRequest, contentText, IMAGE_DETAILS, newId } from '../../kit/index.js';
import { SERVER_LABEL } from './loop.js';
import { INPUT_ITEM_ID_MAX } from './schemas.js';

/**
 * The caller's input as stored items (the shape `input_items` lists) and as chat messages (what
 * llm-api is asked). Unknown item types are a 400 naming the item. Every item this service puts in
 * a response's `output` is accepted back as input (`input: [...previous, ...response.output, next]`).
 */
export type ChatMessage = Record<string, any> & { role: string };
export type InputItem = Record<string, any> & { id: string; type: string };

/** Refuses an input part the model cannot be given, naming it; an accepted part is stored as given. */
function checkInputPart(part: any, param: string): void {
  switch (part?.type) {
    case 'input_text':
    case 'output_text':
    case 'text':
      if (typeof part.text !== 'string') throw badRequest(`${param}.text must be a string`, `${param}.text`);
      return;
    case 'input_image': {
      // A URL, a data URL or a `jan_` media id (llm-api resolves those to download URLs).
      const url = typeof part.image_url === 'string' ? part.image_url : part.file_id;
      if (typeof url !== 'string' || !url) throw badRequest(`${param} needs image_url or file_id`, `${param}.image_url`);
      // Checked here, not left to the step: llm-api would refuse it naming its own chat path.
      if (part.detail !== undefined && part.detail !== null && !IMAGE_DETAILS.has(part.detail)) {
        throw badRequest(`${param}.detail must be one of 'auto', 'low', 'high'`, `${param}.detail`);
      }
      return;
    }
    default:
      throw badRequest(`${param}.type '${String(part?.type)}' is not supported`, `${param}.type`);
  }
}

const ROLES = new Set(['user', 'assistant', 'system', 'developer']);
/** The most characters llm-api's conversation store takes in an item's `status`. */
const STATUS_MAX = 64;

/**
 * Input (a string or items) → stored input items. An accepted item is one the model can be given
 * and llm-api's conversation store takes (`toConversationItem`), so a response in a conversation
 * never completes with an input its conversation refuses. Item ids are the cursors of `input_items`:
 * a client's id is kept when it is a string of at most `INPUT_ITEM_ID_MAX` characters used by no
 * other item of the input (else a 400 naming `input[i].id`); an item without one gets a new id.
 */
export function toInputItems(input: unknown): InputItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') return [{ id: newId('message'), type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: input }] }];
  const ids = new Set<string>();
  return (input as any[]).map((item, index) => {
    const param = `input[${index}]`;
    const type = item.type ?? 'message';
    const id = (kind: Parameters<typeof newId>[0]) => itemId(item.id, param, ids) ?? newId(kind);
    if (type === 'message') {
      if (!ROLES.has(item.role)) throw badRequest(`${param}.role must be one of user, assistant, system, developer`, `${param}.role`);
      const parts = typeof item.content === 'string' ? [{ type: item.role === 'assistant' ? 'output_text' : 'input_text', text: item.content }] : item.content;
      if (!Array.isArray(parts)) throw badRequest(`${param}.content must be a string or an array of parts`, `${param}.content`);
      if (parts.length === 0) throw badRequest(`${param}.content must not be empty`, `${param}.content`);
      parts.forEach((part: any, k: number) => {
        // An assistant's refusal is part of its turn: replayed as that turn's text (see the kit's `contentText`).
        if (item.role === 'assistant' && part?.type === 'refusal') {
          if (typeof part.refusal !== 'string') throw badRequest(`${param}.content[${k}].refusal must be a string`, `${param}.content[${k}].refusal`);
        } else if (item.role === 'assistant' && part?.type === 'input_image') {
          // A chat assistant turn carries text only: the image would be dropped unseen.
          throw badRequest(`${param}.content[${k}].type 'input_image' is not supported in an assistant message: an assistant turn is given to the model as text only`, `${param}.content[${k}].type`);
        } else checkInputPart(part, `${param}.content[${k}]`);
      });
      return { id: id('message'), type: 'message', role: item.role, status: 'completed', content: parts };
    }
    if (type === 'function_call') {
      requiredString(item.call_id, `${param}.call_id`);
      requiredString(item.name, `${param}.name`);
      return { id: id('functionCall'), type, call_id: item.call_id, name: item.name, arguments: jsonArguments(item.arguments, param), status: 'completed' };
    }
    if (type === 'function_call_output') {
      requiredString(item.call_id, `${param}.call_id`);
      // Required, as in the SDK's type: a missing output would reach the model as an empty result.
      if (item.output === undefined || item.output === null) throw badRequest(`Missing required parameter: '${param}.output'.`, `${param}.output`, 'missing_required_parameter');
      const output = Array.isArray(item.output) ? outputParts(item.output, param) : typeof item.output === 'string' ? item.output : JSON.stringify(item.output);
      return { id: id('functionCallOutput'), type, call_id: item.call_id, output, status: 'completed' };
    }
    if (type === 'mcp_call') return mcpCallItem(item, param, id('mcpCall'));
    if (type === 'reasoning') {
      // Kept in the stored input, never sent to the model (see `toChatMessages`).
      if (item.summary !== undefined && !Array.isArray(item.summary)) throw badRequest(`${param}.summary must be an array of summary parts`, `${param}.summary`);
      if (item.content !== undefined && item.content !== null) {
        if (!Array.isArray(item.content)) throw badRequest(`${param}.content must be an array of reasoning parts`, `${param}.content`);
        item.content.forEach((part: any, k: number) => {
          if (typeof part?.type !== 'string' || typeof part.text !== 'string') throw badRequest(`${param}.content[${k}] needs a type and a text string`, `${param}.content[${k}]`);
        });
      }
      return {
        id: id('reasoning'),
        type,
        summary: item.summary ?? [],
        ...(Array.isArray(item.content) ? { content: item.content } : {}),
        ...(typeof item.encrypted_content === 'string' ? { encrypted_content: item.encrypted_content } : {}),
        status: storedStatus(item.status, param),
      };
    }
    if (type === 'mcp_list_tools') {
      const tools = item.tools ?? [];
      if (!Array.isArray(tools)) throw badRequest(`${param}.tools must be an array`, `${param}.tools`);
      tools.forEach((tool: any, k: number) => {
        if (typeof tool?.name !== 'string') throw badRequest(`${param}.tools[${k}].name must be a string`, `${param}.tools[${k}].name`);
      });
      return { id: id('mcpListTools'), type, server_label: typeof item.server_label === 'string' ? item.server_label : SERVER_LABEL, tools, error: errorText(item.error) };
    }
    if (type === 'item_reference') {
      throw badRequest(
        `${param}: item_reference is not supported (stored items are not looked up by id); send the item itself, e.g. from the previous response's output, or continue with previous_response_id`,
        `${param}.type`,
      );
    }
    throw badRequest(`${param}.type '${String(type)}' is not supported`, `${param}.type`);
  });
}

/**
 * A function's output given as content parts (the SDK's `ResponseFunctionCallOutputItemList`): kept
 * as parts (what `input_items` lists and the conversation stores), sent to the model as their text
 * (`toChatMessages`). A chat tool message carries text only, so an image or a file part is a 400
 * naming it rather than dropped unseen.
 */
function outputParts(parts: unknown[], param: string): Array<{ type: 'input_text'; text: string }> {
  return parts.map((part: any, k) => {
    const at = `${param}.output[${k}]`;
    if (part?.type !== 'input_text') throw badRequest(`${at}.type '${String(part?.type)}' is not supported in a function call output: only input_text parts can be given to the model as a tool's output`, `${at}.type`);
    if (typeof part.text !== 'string') throw badRequest(`${at}.text must be a string`, `${at}.text`);
    return { type: 'input_text', text: part.text };
  });
}

/** A client's item id (null or absent: none), refused when it cannot serve as a cursor or is taken. */
function itemId(value: unknown, param: string, taken: Set<string>): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > INPUT_ITEM_ID_MAX) {
    throw badRequest(`${param}.id must be a string of 1 to ${INPUT_ITEM_ID_MAX} characters`, `${param}.id`);
  }
  if (taken.has(value)) throw badRequest(`${param}.id '${value}' is the id of an earlier input item: item ids must be unique`, `${param}.id`);
  taken.add(value);
  return value;
}

function requiredString(value: unknown, param: string): void {
  if (typeof value !== 'string' || value === '') throw badRequest(`${param} must be a non-empty string`, param);
}

/** Tool call arguments: a JSON string (an absent or empty one is `{}`); anything else is a 400 naming them. */
function jsonArguments(value: unknown, param: string): string {
  if (value === undefined || value === null || value === '') return '{}';
  if (typeof value !== 'string') throw badRequest(`${param}.arguments must be a JSON string`, `${param}.arguments`);
  return value;
}

/** A status kept from the input (`completed` when absent): what the conversation store takes, 1 to 64 characters. */
function storedStatus(value: unknown, param: string): string {
  if (value === undefined || value === null) return 'completed';
  if (typeof value !== 'string' || value.length === 0 || value.length > STATUS_MAX) throw badRequest(`${param}.status must be a string of 1 to ${STATUS_MAX} characters`, `${param}.status`);
  return value;
}

/** A tool error as the text the model sees: a string, or the `message` of an error object (`McpToolCallError`). */
function errorText(error: unknown): string | null {
  if (error === undefined || error === null || error === '') return null;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' ? message : JSON.stringify(error);
}

/** An `mcp_call` as this service emits it (the call and its output in one item): replayed as a tool call and its tool message. */
function mcpCallItem(item: Record<string, any>, param: string, id: string): InputItem {
  if (typeof item.name !== 'string' || !item.name) throw badRequest(`${param}.name is required`, `${param}.name`);
  if (item.output !== undefined && item.output !== null && typeof item.output !== 'string') throw badRequest(`${param}.output must be a string`, `${param}.output`);
  return {
    id,
    type: 'mcp_call',
    server_label: typeof item.server_label === 'string' ? item.server_label : SERVER_LABEL,
    name: item.name,
    arguments: jsonArguments(item.arguments, param),
    output: item.output ?? null,
    error: errorText(item.error),
    status: storedStatus(item.status, param),
    ...(typeof item.approval_request_id === 'string' ? { approval_request_id: item.approval_request_id } : {}),
  };
}

/**
 * Stored items (input or output, or a conversation's history) → chat messages, in order;
 * consecutive tool calls share one assistant turn. `reasoning` and `mcp_list_tools` items send
 * nothing: a chat upstream takes no reasoning as input (a summary is not what the model thought, and
 * replayed as text it would read as something said), and the tools offered are each step's `tools`.
 *
 * Never a validator: the input was checked by `toInputItems`, and a conversation's items by
 * llm-api's item rules, which take more shapes than a request's input (SPEC.md's nested parts such
 * as `{type: "image", image: {url}}` or `{output_text: {text}}`). Whatever cannot be a chat message
 * is left out, as chat completions leave it out of the same conversation: parts holding neither text
 * nor an image (files, audio, reasoning), messages left with no part, roles other than user,
 * assistant, system and developer, item types a chat model has no form for, and tool calls
 * without a name or call id.
 */
export function toChatMessages(items: Array<Record<string, any>>): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const pendingOutputs: ChatMessage[] = [];
  const assistantWithCalls = () => {
    const last = messages.at(-1);
    if (last?.role === 'assistant' && Array.isArray(last.tool_calls) && pendingOutputs.length === 0) return last;
    flushOutputs();
    const turn: ChatMessage = { role: 'assistant', content: null, tool_calls: [] };
    messages.push(turn);
    return turn;
  };
  const flushOutputs = () => void messages.push(...pendingOutputs.splice(0));
  for (const item of items) {
    if (item.type === 'message') {
      if (!ROLES.has(item.role)) continue;
      if (item.role === 'assistant') {
        flushOutputs();
        messages.push({ role: 'assistant', content: contentText(item.content) });
        continue;
      }
      const stored = typeof item.content === 'string' ? [{ type: 'input_text', text: item.content }] : Array.isArray(item.content) ? item.content : [];
      const parts = stored.map(chatPart).filter((part): part is Record<string, any> => part !== null);
      if (parts.length === 0) continue;
      flushOutputs();
      const plain = parts.every((p) => p.type === 'text');
      messages.push({ role: item.role, content: plain ? parts.map((p) => p.text).join('') : parts });
    } else if (item.type === 'function_call' || item.type === 'mcp_call') {
      const callId = item.type === 'mcp_call' ? item.id : item.call_id;
      if (typeof callId !== 'string' || !callId || typeof item.name !== 'string' || !item.name) continue;
      const args = typeof item.arguments === 'string' && item.arguments ? item.arguments : '{}';
      assistantWithCalls().tool_calls.push({ id: callId, type: 'function', function: { name: item.name, arguments: args } });
      if (item.type === 'mcp_call') pendingOutputs.push({ role: 'tool', tool_call_id: callId, content: item.error ? `Error: ${errorText(item.error)}` : outputText(item.output ?? '') });
    } else if (item.type === 'custom_tool_call') {
      // Written by chat completions (a custom tool's call: free text in); the loop's chat steps send it
      // on as a function call taking `{input}`, as deep research does.
      if (typeof item.call_id !== 'string' || !item.call_id || typeof item.name !== 'string' || !item.name) continue;
      const args = JSON.stringify({ input: typeof item.input === 'string' ? item.input : '' });
      assistantWithCalls().tool_calls.push({ id: item.call_id, type: 'function', function: { name: item.name, arguments: args } });
    } else if (item.type === 'function_call_output' || item.type === 'custom_tool_call_output') {
      if (typeof item.call_id !== 'string' || !item.call_id) continue;
      flushOutputs();
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: outputText(item.output) });
    }
  }
  flushOutputs();
  return messages;
}

/**
 * A stored part as the chat part the model gets, or null when it holds neither text nor an image.
 * Text in each of its forms: `text` (`input_text`, `output_text`, `text`), an assistant's
 * `refusal`, the nested `output_text: {text}`. An image in each of its forms: `input_image`
 * (`image_url` or `file_id`), chat's `image_url` (a string or `{url, detail}`), the nested
 * `image: {url | file_id, detail}`. A `jan_` media id stays an id: llm-api resolves it for each step.
 */
function chatPart(part: unknown): Record<string, unknown> | null {
  if (typeof part !== 'object' || part === null) return null;
  const p = part as Record<string, any>;
  const image = imageOf(p);
  if (image) return { type: 'image_url', image_url: image };
  const text = typeof p.text === 'string' ? p.text : typeof p.refusal === 'string' ? p.refusal : typeof p.output_text?.text === 'string' ? p.output_text.text : null;
  return text === null ? null : { type: 'text', text };
}

function imageOf(part: Record<string, any>): { url: string; detail?: string } | null {
  const nested = typeof part.image === 'object' && part.image !== null ? part.image : null;
  let url: unknown;
  if (part.type === 'input_image' || part.type === 'image_url') url = typeof part.image_url === 'string' ? part.image_url : typeof part.file_id === 'string' ? part.file_id : part.image_url?.url;
  else if (nested) url = typeof nested.url === 'string' ? nested.url : nested.file_id;
  if (typeof url !== 'string' || !url) return null;
  // A detail the chat API does not take (stored by a client of the conversations API) is left out.
  const detail = [part.detail, part.image_url?.detail, nested?.detail].find((d) => typeof d === 'string');
  return detail && IMAGE_DETAILS.has(detail) ? { url, detail } : { url };
}

/** A function's output as a tool message's text: a string as it is, parts by their text (their JSON when they hold none). */
function outputText(output: unknown): string {
  if (typeof output === 'string') return output;
  // Output parts of a request's input (all text, checked by `outputParts`): their text, even when empty.
  if (Array.isArray(output) && output.every((part) => part?.type === 'input_text' && typeof part.text === 'string')) return contentText(output);
  return contentText(output) || JSON.stringify(output ?? '');
}

/**
 * A stored item (input or output) as llm-api's conversation store takes it
 * (`POST /v1/conversations/{id}/items`): rebuilt from the fields `toInputItems` checked (or the
 * recorder wrote), so every item of a completed turn is accepted there. The store assigns its own
 * ids; a part keeps its text or image (not a client's annotations or other extra fields); an
 * `mcp_call` without output and an `mcp_list_tools` tool without description leave the field out
 * rather than send null, which the store refuses.
 */
export function toConversationItem(item: Record<string, any>): Record<string, unknown> {
  const status = typeof item.status === 'string' && item.status ? item.status : 'completed';
  switch (item.type) {
    case 'message':
      return { type: 'message', role: item.role, status, content: (item.content as any[]).map(conversationPart) };
    case 'function_call':
      return { type: item.type, call_id: item.call_id, name: item.name, arguments: item.arguments, status };
    case 'function_call_output':
      return { type: item.type, call_id: item.call_id, output: item.output, status };
    case 'mcp_call':
      return {
        type: item.type,
        server_label: item.server_label,
        name: item.name,
        arguments: item.arguments,
        ...(typeof item.output === 'string' ? { output: item.output } : {}),
        error: item.error ?? null,
        status,
        ...(typeof item.approval_request_id === 'string' ? { approval_request_id: item.approval_request_id } : {}),
      };
    case 'reasoning':
      return {
        type: item.type,
        summary: item.summary,
        ...(Array.isArray(item.content) ? { content: item.content.map((part: any) => ({ type: part.type, text: part.text })) } : {}),
        ...(typeof item.encrypted_content === 'string' ? { encrypted_content: item.encrypted_content } : {}),
        status,
      };
    case 'mcp_list_tools':
      return {
        type: item.type,
        server_label: item.server_label,
        tools: (item.tools as any[]).map((tool) => ({
          name: tool.name,
          ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
          ...(tool.input_schema !== undefined && tool.input_schema !== null ? { input_schema: tool.input_schema } : {}),
          ...(tool.annotations !== undefined && tool.annotations !== null ? { annotations: tool.annotations } : {}),
        })),
        error: item.error ?? null,
        status,
      };
    default: {
      const { id: _id, ...rest } = item;
      return rest;
    }
  }
}

function conversationPart(part: Record<string, any>): Record<string, unknown> {
  switch (part.type) {
    case 'input_text':
    case 'text':
      return { type: part.type, text: part.text };
    case 'output_text':
      return { type: 'output_text', text: part.text, annotations: [] };
    case 'refusal':
      return { type: 'refusal', refusal: part.refusal };
    case 'input_image':
      return {
        type: 'input_image',
        ...(typeof part.image_url === 'string' ? { image_url: part.image_url } : {}),
        ...(typeof part.file_id === 'string' ? { file_id: part.file_id } : {}),
        ...(typeof part.detail === 'string' ? { detail: part.detail } : {}),
      };
    default:
      return part;
  }
}
