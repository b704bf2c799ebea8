import { badRequest } from '../../kit/index.js';
import { itemId } from './recorder.js';

/**
 * The caller's input as stored items (the shape `input_items` lists) and as chat messages (what
 * llm-api is asked). Unknown item types are a 400 naming the item.
 */
export type ChatMessage = Record<string, any> & { role: string };
export type InputItem = Record<string, any> & { id: string; type: string };

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part: any) => (typeof part?.text === 'string' ? part.text : typeof part?.refusal === 'string' ? part.refusal : '')).join('');
}

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
  if (typeof input === 'string') return [{ id: itemId('msg'), type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: input }] }];
  return (input as any[]).map((item, index) => {
    const param = `input[${index}]`;
    const type = item.type ?? 'message';
    if (type === 'message') {
      if (!ROLES.has(item.role)) throw badRequest(`${param}.role must be one of user, assistant, system, developer`, `${param}.role`);
      const parts = typeof item.content === 'string' ? [{ type: item.role === 'assistant' ? 'output_text' : 'input_text', text: item.content }] : item.content;
      if (!Array.isArray(parts)) throw badRequest(`${param}.content must be a string or an array of parts`, `${param}.content`);
      parts.forEach((part: unknown, k: number) => chatPart(part, `${param}.content[${k}]`));
      return { id: typeof item.id === 'string' ? item.id : itemId('msg'), type: 'message', role: item.role, status: 'completed', content: parts };
    }
    if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string') throw badRequest(`${param} needs call_id and name`, `${param}.call_id`);
      return { id: item.id ?? itemId('fc'), type, call_id: item.call_id, name: item.name, arguments: String(item.arguments ?? '{}'), status: 'completed' };
    }
    if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw badRequest(`${param}.call_id is required`, `${param}.call_id`);
      const output = typeof item.output === 'string' ? item.output : JSON.stringify(item.output ?? '');
      return { id: item.id ?? itemId('fco'), type, call_id: item.call_id, output, status: 'completed' };
    }
    throw badRequest(`${param}.type '${String(type)}' is not supported`, `${param}.type`);
  });
}

/** Stored items (input or output) → chat messages, in order; consecutive tool calls share one assistant turn. */
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
      if (item.role === 'assistant') messages.push({ role: 'assistant', content: textOf(item.content) });
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
