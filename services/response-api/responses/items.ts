import { badRequest, contentText, newId } from '../../kit/index.js';
import { SERVER_LABEL } from './loop.js';

/**
 * The caller's input as stored items (the shape `input_items` lists) and as chat messages (what
 * llm-api is asked). Unknown item types are a 400 naming the item. Every item this service puts in
 * a response's `output` is accepted back as input (`input: [...previous, ...response.output, next]`).
 */
export type ChatMessage = Record<string, any> & { role: string };
export type InputItem = Record<string, any> & { id: string; type: string };

function chatPart(part: any, param: string): Record<string, unknown> {
  switch (part?.type) {
    case 'input_text':
    case 'output_text':
    case 'text':
      if (typeof part.text !== 'string') throw badRequest(`${param}.text must be a string`, `${param}.text`);
      return { type: 'text', text: part.text };
    case 'input_image': {
      // A URL, a data URL or a `jan_` media id (llm-api resolves those to download URLs).
      const url = typeof part.image_url === 'string' ? part.image_url : part.file_id;
      if (typeof url !== 'string' || !url) throw badRequest(`${param} needs image_url or file_id`, `${param}.image_url`);
      return { type: 'image_url', image_url: { url, ...(part.detail ? { detail: part.detail } : {}) } };
    }
    default:
      throw badRequest(`${param}.type '${String(part?.type)}' is not supported`, `${param}.type`);
  }
}

const ROLES = new Set(['user', 'assistant', 'system', 'developer']);

/** Input (a string or items) → stored input items. */
export function toInputItems(input: unknown): InputItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') return [{ id: newId('message'), type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: input }] }];
  return (input as any[]).map((item, index) => {
    const param = `input[${index}]`;
    const type = item.type ?? 'message';
    if (type === 'message') {
      if (!ROLES.has(item.role)) throw badRequest(`${param}.role must be one of user, assistant, system, developer`, `${param}.role`);
      const parts = typeof item.content === 'string' ? [{ type: item.role === 'assistant' ? 'output_text' : 'input_text', text: item.content }] : item.content;
      if (!Array.isArray(parts)) throw badRequest(`${param}.content must be a string or an array of parts`, `${param}.content`);
      parts.forEach((part: any, k: number) => {
        // An assistant's refusal is part of its turn: replayed as that turn's text (see the kit's `contentText`).
        if (item.role === 'assistant' && part?.type === 'refusal') {
          if (typeof part.refusal !== 'string') throw badRequest(`${param}.content[${k}].refusal must be a string`, `${param}.content[${k}].refusal`);
        } else chatPart(part, `${param}.content[${k}]`);
      });
      return { id: typeof item.id === 'string' ? item.id : newId('message'), type: 'message', role: item.role, status: 'completed', content: parts };
    }
    if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string') throw badRequest(`${param} needs call_id and name`, `${param}.call_id`);
      return { id: item.id ?? newId('functionCall'), type, call_id: item.call_id, name: item.name, arguments: String(item.arguments ?? '{}'), status: 'completed' };
    }
    if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw badRequest(`${param}.call_id is required`, `${param}.call_id`);
      const output = typeof item.output === 'string' ? item.output : JSON.stringify(item.output ?? '');
      return { id: item.id ?? newId('functionCallOutput'), type, call_id: item.call_id, output, status: 'completed' };
    }
    if (type === 'mcp_call') return mcpCallItem(item, param);
    if (type === 'reasoning') {
      // Kept in the stored input, never sent to the model (see `toChatMessages`).
      if (item.summary !== undefined && !Array.isArray(item.summary)) throw badRequest(`${param}.summary must be an array of summary parts`, `${param}.summary`);
      return {
        id: typeof item.id === 'string' ? item.id : newId('reasoning'),
        type,
        summary: item.summary ?? [],
        ...(Array.isArray(item.content) ? { content: item.content } : {}),
        ...(typeof item.encrypted_content === 'string' ? { encrypted_content: item.encrypted_content } : {}),
        status: typeof item.status === 'string' ? item.status : 'completed',
      };
    }
    if (type === 'mcp_list_tools') {
      const tools = item.tools ?? [];
      if (!Array.isArray(tools)) throw badRequest(`${param}.tools must be an array`, `${param}.tools`);
      tools.forEach((tool: any, k: number) => {
        if (typeof tool?.name !== 'string') throw badRequest(`${param}.tools[${k}].name must be a string`, `${param}.tools[${k}].name`);
      });
      return { id: typeof item.id === 'string' ? item.id : newId('mcpListTools'), type, server_label: typeof item.server_label === 'string' ? item.server_label : SERVER_LABEL, tools, error: errorText(item.error) };
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

/** A tool error as the text the model sees: a string, or the `message` of an error object (`McpToolCallError`). */
function errorText(error: unknown): string | null {
  if (error === undefined || error === null || error === '') return null;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' ? message : JSON.stringify(error);
}

/** An `mcp_call` as this service emits it (the call and its output in one item): replayed as a tool call and its tool message. */
function mcpCallItem(item: Record<string, any>, param: string): InputItem {
  if (typeof item.name !== 'string' || !item.name) throw badRequest(`${param}.name is required`, `${param}.name`);
  if (item.arguments !== undefined && typeof item.arguments !== 'string') throw badRequest(`${param}.arguments must be a JSON string`, `${param}.arguments`);
  if (item.output !== undefined && item.output !== null && typeof item.output !== 'string') throw badRequest(`${param}.output must be a string`, `${param}.output`);
  return {
    id: typeof item.id === 'string' ? item.id : newId('mcpCall'),
    type: 'mcp_call',
    server_label: typeof item.server_label === 'string' ? item.server_label : SERVER_LABEL,
    name: item.name,
    arguments: item.arguments || '{}',
    output: item.output ?? null,
    error: errorText(item.error),
    status: typeof item.status === 'string' ? item.status : 'completed',
    ...(typeof item.approval_request_id === 'string' ? { approval_request_id: item.approval_request_id } : {}),
  };
}

/**
 * Stored items (input or output) → chat messages, in order; consecutive tool calls share one
 * assistant turn. `reasoning` and `mcp_list_tools` items send nothing: a chat upstream takes no
 * reasoning as input (a summary is not what the model thought, and replayed as text it would read
 * as something said), and the tools offered are each step's `tools`.
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
      flushOutputs();
      if (item.role === 'assistant') messages.push({ role: 'assistant', content: contentText(item.content) });
      else {
        const parts = (item.content as any[]).map((part, k) => chatPart(part, `content[${k}]`));
        const plain = parts.every((p) => p.type === 'text');
        messages.push({ role: item.role, content: plain ? parts.map((p) => p.text).join('') : parts });
      }
    } else if (item.type === 'function_call' || item.type === 'mcp_call') {
      const callId = item.type === 'mcp_call' ? item.id : item.call_id;
      assistantWithCalls().tool_calls.push({ id: callId, type: 'function', function: { name: item.name, arguments: item.arguments || '{}' } });
      if (item.type === 'mcp_call') pendingOutputs.push({ role: 'tool', tool_call_id: callId, content: item.error ? `Error: ${item.error}` : String(item.output ?? '') });
    } else if (item.type === 'function_call_output') {
      flushOutputs();
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: item.output });
    }
  }
  flushOutputs();
  return messages;
}
