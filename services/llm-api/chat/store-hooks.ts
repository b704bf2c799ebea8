import { ApiError, contentText, newId, storableText, type Principal, type ServiceContext } from '../../kit/index.js';
import { appendItems, createConversation, openHistory, type ConversationDeps } from '../conversations/index.js';
import { findProject } from '../projects/index.js';
import { contextLengthOf, type ResolvedModel } from '../models/registry.js';
import type { ConversationSession, ConversationSessions, ProjectContext, StoredAnswer } from './completions.js';
import { fitToContext } from './history.js';
import type { ChatRequest } from './schemas.js';

/**
 * `store: true` (SPEC.md 4.2): the conversation (given as an id string or `{id}`, or created when
 * absent) lends its history — the project instruction first as the system message, then the stored
 * items of the active branch replayed as messages (chat/history.ts), trimmed oldest-first to fit
 * the model's context — and receives the exchange through the conversations domain's
 * `appendItems`, which emits `message.sent` once per stored user or assistant message.
 *
 * The exchange is stored as the conversation items OpenAI's Conversations API uses: messages, and
 * for tools a `function_call` item per call the answer makes (`call_id`, `name`, `arguments`) and
 * a `function_call_output` item per tool result the client sends back (`call_id`, `output`); a
 * custom tool's call is a `custom_tool_call` item (`call_id`, `name`, `input`), its result a
 * `custom_tool_call_output` item.
 * Nothing is written before the answer: a conversation that `store: true` creates is only named
 * (its id rides on the answer, or on a stream's first chunk) and is created with the exchange, in
 * one transaction.
 */

type Message = ChatRequest['messages'][number];

const NO_CALLS: ReadonlySet<string> = new Set();

/** Title of a conversation `store: true` creates: the latest message's first characters. */
export const TITLE_CODE_POINTS = 80;

/** The first `count` code points of `text` (a surrogate pair is never split). */
export function firstCodePoints(text: string, count: number): string {
  let end = 0;
  for (let n = 0; n < count && end < text.length; n++) {
    const unit = text.charCodeAt(end);
    const pair = unit >= 0xd800 && unit <= 0xdbff && end + 1 < text.length && (text.charCodeAt(end + 1) & 0xfc00) === 0xdc00;
    end += pair ? 2 : 1;
  }
  return end === text.length ? text : text.slice(0, end);
}

/**
 * The input messages `store: true` keeps: the latest message, or, when the request ends with tool
 * results, all of them (the answers to each of the calls of the turn before).
 */
function latestInput(messages: Message[]): Message[] {
  let from = messages.length - 1;
  if (messages[from]!.role === 'tool') while (from > 0 && messages[from - 1]!.role === 'tool') from--;
  return messages.slice(from);
}

/** A content part as it may appear in a chat message (only these fields are read). */
interface ContentPart {
  type?: string;
  text?: unknown;
  image_url?: string | { url?: string; detail?: unknown };
  [field: string]: unknown;
}

/**
 * The ids of the custom tools' calls among `messages` (the request's, with the history replayed
 * before them): a tool result answering one is stored as a `custom_tool_call_output`.
 */
function customCallIds(messages: readonly Message[]): ReadonlySet<string> {
  const ids = new Set<string>();
  for (const message of messages) {
    if (message.role !== 'assistant' || !Array.isArray(message.tool_calls)) continue;
    for (const call of message.tool_calls) if (call.type === 'custom' && call.id) ids.add(call.id);
  }
  return ids;
}

/** The chat form of an input message → the items the conversations domain accepts for it. */
function toItems(message: Message, customCalls: ReadonlySet<string>): Record<string, unknown>[] {
  if (message.role === 'tool' && typeof message.tool_call_id === 'string') {
    const type = customCalls.has(message.tool_call_id) ? 'custom_tool_call_output' : 'function_call_output';
    return [{ type, call_id: message.tool_call_id, output: contentText(message.content) }];
  }
  const role = message.role === 'function' ? 'tool' : message.role;
  const calls = role === 'assistant' && Array.isArray(message.tool_calls) ? message.tool_calls.filter((call) => call.id && (call.function || (call.type === 'custom' && call.custom))) : [];
  const items: Record<string, unknown>[] = [];
  if (calls.length === 0 || contentText(message.content) !== '') items.push({ type: 'message', role, content: contentOf(message) });
  for (const call of calls) {
    if (call.type === 'custom' && call.custom) items.push({ type: 'custom_tool_call', call_id: call.id, name: call.custom.name, input: call.custom.input });
    else items.push({ type: 'function_call', call_id: call.id, name: call.function!.name, arguments: call.function!.arguments });
  }
  return items;
}

function contentOf(message: Message): unknown {
  if (typeof message.content === 'string') return message.content;
  return ((message.content ?? []) as ContentPart[]).map((part) => {
    if (part.type === 'text') return { type: 'input_text', text: typeof part.text === 'string' ? part.text : '' };
    if (part.type === 'image_url') {
      const detail = typeof part.image_url === 'object' ? part.image_url.detail : undefined;
      // The detail is kept so a later turn replays the image as it was asked for.
      return { type: 'input_image', image_url: typeof part.image_url === 'string' ? part.image_url : part.image_url?.url, ...(typeof detail === 'string' ? { detail } : {}) };
    }
    return part;
  });
}

/**
 * The answer → its items: the reasoning (when kept), the assistant text, one `function_call` per tool
 * call (`custom_tool_call` for a custom tool's). The provider's text is kept as it came, except
 * what no database stores (a NUL, an unpaired surrogate), which becomes U+FFFD: refusing it would
 * lose an exchange the client was already answered (or charged) for.
 */
function answerItems(answer: StoredAnswer, keepReasoning: boolean): Record<string, unknown>[] {
  const items: Record<string, unknown>[] = [];
  if (keepReasoning && answer.reasoning) items.push({ type: 'reasoning', status: answer.status, summary: [{ type: 'summary_text', text: storableText(answer.reasoning) }] });
  const calls = (answer.toolCalls ?? []).filter((call) => call.id !== '' && call.name !== '');
  // A turn that only calls tools is its calls; any other answer (even an empty one) is a message.
  if (answer.content !== '' || calls.length === 0) {
    items.push({ type: 'message', role: 'assistant', status: answer.status, content: [{ type: 'output_text', text: storableText(answer.content), annotations: [] }] });
  }
  for (const call of calls) {
    if (call.custom) items.push({ type: 'custom_tool_call', status: answer.status, call_id: storableText(call.id), name: storableText(call.name), input: storableText(call.arguments) });
    else items.push({ type: 'function_call', status: answer.status, call_id: storableText(call.id), name: storableText(call.name), arguments: storableText(call.arguments) });
  }
  return items;
}

/**
 * The caller's project `projectId` as a request made in it sees it: its id (the request's usage is
 * attributed to it) and its instruction as the system message that comes first. The one rule of
 * both ways a request is made in a project: a chat request naming a conversation of the project
 * (`prepare`), and a step of a Responses API response in such a conversation (the
 * `X-Gateway-Project-ID` header response-api sends). A project that is not the caller's (or was
 * deleted) is none: no instruction, nothing attributed.
 */
async function projectContext(knex: Parameters<typeof findProject>[0], projectId: string, userId: string): Promise<ProjectContext | null> {
  const project = await findProject(knex, projectId, userId);
  if (!project) return null;
  return { projectId: project.id, system: project.instruction ? ({ role: 'system', content: project.instruction } as Message) : null };
}

/**
 * `storeMessage` rewrites a message about to be stored (with `store: true`), e.g. inline images
 * uploaded as media and replaced by their `jan_` references; the request sent upstream is unchanged.
 */
export function createStoreHooks(
  ctx: ServiceContext,
  options: { conversations: ConversationDeps; storeMessage?: (principal: Principal, message: Message) => Promise<Message> },
): ConversationSessions {
  const knex = ctx.runtime.db.knex;
  const clock = ctx.runtime.clock;
  const conversations = options.conversations;
  return {
    project: (projectId, principal) => projectContext(knex, projectId, principal.userId),
    async prepare(input, principal, model: ResolvedModel): Promise<ConversationSession> {
      const ref = typeof input.conversation === 'string' ? input.conversation : input.conversation?.id;
      let latest = latestInput(input.messages);
      const system: Message[] = [];
      let messages = input.messages;
      let conversation: ConversationSession['conversation'];
      let projectId: string | null = null;
      let projectSystem: Message | null = null;
      if (ref) {
        const history = await openHistory(knex, { conversationId: ref, userId: principal.userId, param: 'conversation' });
        conversation = { id: history.conversation.id, title: history.conversation.title };
        const project = history.conversation.project_id ? await projectContext(knex, history.conversation.project_id, principal.userId) : null;
        if (project) {
          projectId = project.projectId;
          projectSystem = project.system;
          if (project.system) system.push(project.system);
        }
        const context = contextLengthOf(model) ?? Number.POSITIVE_INFINITY;
        const reserve = input.max_completion_tokens ?? input.max_tokens ?? 0;
        messages = await fitToContext(system, history.newestFirst(), input.messages, context - reserve);
      } else {
        // Only reached with store: true (the caller asks for a session without a conversation only
        // then). Named now, created with the exchange.
        conversation = { id: newId('conversation'), title: firstCodePoints(contentText(latest.at(-1)!.content), TITLE_CODE_POINTS) || null };
      }
      const creating = !ref;
      const ids = { conversationId: conversation.id, userId: principal.userId };

      const append = async (db: typeof knex, answer: StoredAnswer): Promise<void> => {
        const stored = answerItems(answer, input.store_reasoning === true);
        const common = { ...ids, model: storableText(answer.model), tokensUsed: answer.usage ? { prompt: answer.usage.prompt_tokens, completion: answer.usage.completion_tokens } : null, clock };
        // `answerFrom`: an assistant message of the input (a prefill) is not the answer, so a
        // tool-only answer reports its usage on no event rather than on it.
        // Only a request ending with tool results needs to know which calls were custom tools'.
        const customCalls = latest[0]?.role === 'tool' ? customCallIds(messages) : NO_CALLS;
        try {
          const input = latest.flatMap((message) => toItems(message, customCalls));
          await appendItems(db, { ...common, items: [...input, ...stored], answerFrom: input.length });
        } catch (error) {
          if (!(error instanceof ApiError && error.status === 400)) throw error;
          // An input message had parts the item schema refuses: keep its text instead.
          const plain = latest.map((m) => (m.role === 'tool' && typeof m.tool_call_id === 'string' ? toItems(m, customCalls)[0]! : { type: 'message', role: m.role === 'function' ? 'tool' : m.role, content: contentText(m.content) || '(non-text content)' }));
          await appendItems(db, { ...common, items: [...plain, ...stored], answerFrom: plain.length });
        }
      };

      return {
        messages,
        conversation,
        projectId,
        projectSystem,
        async stage() {
          const rewrite = options.storeMessage;
          if (rewrite) latest = await Promise.all(latest.map((message) => rewrite(principal, message)));
        },
        async finish(answer) {
          if (!creating) return append(knex, answer);
          await knex.transaction(async (trx) => {
            await createConversation({ knex: trx, clock: conversations.clock, projects: conversations.projects }, principal.userId, { title: conversation.title } as never, { id: conversation.id });
            await append(trx, answer);
          });
        },
      };
    },
  };
}
