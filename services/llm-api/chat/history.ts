import { contentText, estimateTokensOf, IMAGE_DETAILS, keepNewest } from '../../kit/index.js';
import type { HistoryItem } from '../conversations/index.js';
import type { ChatRequest } from './schemas.js';

/**
 * A stored conversation replayed as chat messages (`store: true` or a `conversation`): the stored
 * items of the active branch, newest first, become the messages a provider accepts, trimmed to the
 * model's context.
 *
 * Messages are replayed as they were stored. A tool-calling turn is replayed as one assistant
 * message with its `tool_calls` (the `function_call` and `custom_tool_call` items, with the
 * assistant text stored just before them, if any), followed by the `tool` messages answering them
 * (the `function_call_output` and `custom_tool_call_output` items). Such a turn is kept or dropped as a whole, so trimming never leaves a `tool` message
 * without the call it answers, which providers refuse. A call without a stored output is replayed
 * only when the request's own leading `tool` messages answer it (the client sending the results of
 * the calls the conversation ended with); an output whose call is not there is not replayed.
 */

type Message = ChatRequest['messages'][number];

/** A stored call replayed in the chat form: a function's, or (`custom_tool_call`) a custom tool's. */
type ReplayedCall = { id: string; type: 'function'; function: { name: string; arguments: string } } | { id: string; type: 'custom'; custom: { name: string; input: string } };

/** A content part as it may appear in a chat message or a stored item (only these fields are read). */
interface ContentPart {
  type?: string;
  text?: unknown;
  image_url?: string | { url?: string };
  [field: string]: unknown;
}

const REPLAYED_ROLES: ReadonlySet<string> = new Set(['user', 'assistant', 'system', 'developer']);

/**
 * Keeps system messages and the request's own messages, then the stored turns newest first while
 * they fit: the oldest are dropped, and the history is read no further than the first turn that does
 * not fit (a conversation longer than the context costs what the context holds, not its length).
 */
export async function fitToContext(system: Message[], newestFirst: AsyncIterable<HistoryItem>, current: Message[], budget: number): Promise<Message[]> {
  const used = estimateTokensOf(system) + estimateTokensOf(current);
  const kept = await keepNewest(turns(newestFirst, answeredBy(current)), estimateTokensOf, budget - used);
  const messages = [...system];
  for (const turn of kept) messages.push(...turn);
  return [...messages, ...current];
}

/** The call ids the request's leading `tool` messages answer (none when it starts otherwise). */
function answeredBy(current: Message[]): ReadonlySet<string> {
  const ids = new Set<string>();
  for (const message of current) {
    if (message.role !== 'tool') break;
    if (typeof message.tool_call_id === 'string') ids.add(message.tool_call_id);
  }
  return ids;
}

/**
 * The history as turns, newest first, each a list of messages in their order that is kept or
 * dropped whole: one message, or a tool-calling assistant message with the tool messages
 * answering it. Reading newest first, a turn's outputs come before its calls, and its calls end at
 * the first item that is neither a call nor (for the assistant text stored with them) an assistant
 * message; item types that are not replayed (`reasoning`, …) are passed over.
 */
async function* turns(newestFirst: AsyncIterable<HistoryItem>, answered: ReadonlySet<string>): AsyncGenerator<Message[]> {
  let outputs: Message[] = []; // oldest first
  let calls: ReplayedCall[] = []; // oldest first
  for await (const item of newestFirst) {
    const call = callOf(item);
    if (call) {
      calls.unshift(call);
      continue;
    }
    const output = outputOf(item);
    if (output) {
      if (calls.length > 0) {
        // Outputs older than a block of calls belong to an earlier turn.
        const turn = toolTurn(null, calls, outputs, answered);
        if (turn) yield turn;
        calls = [];
        outputs = [];
      }
      outputs.unshift(output);
      continue;
    }
    const message = historyMessage(item);
    if (calls.length > 0) {
      // The assistant text stored just before the calls is that turn's text.
      const text = message?.role === 'assistant' && typeof message.content === 'string' ? message.content : null;
      const turn = toolTurn(text, calls, outputs, answered);
      calls = [];
      outputs = [];
      if (turn) yield turn;
      if (text !== null) continue;
    } else if (message) {
      outputs = []; // outputs whose calls are not stored: not replayed
    }
    if (message) yield [message];
  }
  if (calls.length > 0) {
    const turn = toolTurn(null, calls, outputs, answered);
    if (turn) yield turn;
  }
}

/**
 * An assistant message with the calls that are answered (by a stored output, or by the request's
 * leading tool messages), then the outputs answering them; null when nothing of it is left.
 */
function toolTurn(text: string | null, calls: ReplayedCall[], outputs: Message[], answered: ReadonlySet<string>): Message[] | null {
  const stored = new Set<string>();
  for (const output of outputs) stored.add(output.tool_call_id as string);
  const kept = calls.filter((call) => stored.has(call.id) || answered.has(call.id));
  if (kept.length === 0) return text ? [{ role: 'assistant', content: text } as Message] : null;
  const ids = new Set(kept.map((call) => call.id));
  const turn: Message[] = [{ role: 'assistant', content: text || null, tool_calls: kept } as Message];
  for (const output of outputs) if (ids.has(output.tool_call_id as string)) turn.push(output);
  return turn;
}

const str = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value : undefined);

/** A stored tool call (`function_call` or `custom_tool_call`, with its call id and name), or null. */
function callOf(item: HistoryItem): ReplayedCall | null {
  if (item.type === 'function_call') {
    const id = str(item.body.call_id);
    const name = str(item.body.name);
    return id && name ? { id, type: 'function', function: { name, arguments: typeof item.body.arguments === 'string' ? item.body.arguments : '{}' } } : null;
  }
  if (item.type === 'custom_tool_call') {
    const id = str(item.body.call_id);
    const name = str(item.body.name);
    return id && name ? { id, type: 'custom', custom: { name, input: typeof item.body.input === 'string' ? item.body.input : '' } } : null;
  }
  return null;
}

/** A stored tool result (`function_call_output`, `custom_tool_call_output`, or a `tool` message naming its call) as a tool message, or null. */
function outputOf(item: HistoryItem): Message | null {
  let callId: string | undefined;
  let output: unknown;
  if (item.type === 'function_call_output' || item.type === 'custom_tool_call_output') {
    callId = str(item.body.call_id);
    output = item.body.output;
  } else if (item.type === 'message' && item.role === 'tool') {
    callId = str(item.body.tool_call_id) ?? str(item.body.call_id);
    output = item.content;
  } else return null;
  if (!callId) return null;
  return { role: 'tool', tool_call_id: callId, content: contentText(output) } as Message;
}

/** The image a stored part holds (`input_image` as chat stores it, or the nested `image` kind), if any. */
function imageOf(part: ContentPart | null): { url: string; detail?: string } | null {
  if (!part || typeof part !== 'object') return null;
  const nested = part.image as { url?: unknown; detail?: unknown } | undefined;
  const url = typeof part.image_url === 'string' ? part.image_url : typeof part.image_url?.url === 'string' ? part.image_url.url : typeof nested?.url === 'string' ? nested.url : undefined;
  if (!url || (part.type !== 'input_image' && part.type !== 'image_url' && part.type !== 'image' && !nested)) return null;
  const detail = typeof part.detail === 'string' ? part.detail : typeof nested?.detail === 'string' ? nested.detail : undefined;
  return detail && IMAGE_DETAILS.has(detail) ? { url, detail } : { url };
}

/**
 * A stored message item → a chat message, or null (other item types, and messages without text or
 * images, are not replayed here). A user message that stored images (the only role whose chat
 * content takes them) is replayed with them as `image_url` parts holding what was stored (a `jan_`
 * id or `data:<mime>;jan_…` placeholder), so the media step resolves them to download URLs exactly
 * as on the turn that sent them; text-only messages stay plain strings.
 */
function historyMessage(item: HistoryItem): Message | null {
  if (item.type !== 'message' || !item.role || !REPLAYED_ROLES.has(item.role)) return null;
  const role = item.role as Message['role'];
  if (role === 'user' && Array.isArray(item.content) && (item.content as ContentPart[]).some((part) => imageOf(part) !== null)) {
    const parts = (item.content as ContentPart[]).flatMap((part): Record<string, unknown>[] => {
      const image = imageOf(part);
      if (image) return [{ type: 'image_url', image_url: image }];
      const partText = contentText([part]);
      return partText ? [{ type: 'text', text: partText }] : [];
    });
    return { role, content: parts } as Message;
  }
  const text = contentText(item.content);
  return text ? ({ role, content: text } as Message) : null;
}

