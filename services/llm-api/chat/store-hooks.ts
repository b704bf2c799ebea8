import { ApiError, contentText, estimateTokens, estimateTokensOf, keepNewest, type Principal, type ServiceContext } from '../../kit/index.js';
import { appendItems, createConversation, openHistory, type ConversationDeps, type HistoryItem } from '../conversations/index.js';
import { findProject } from '../projects/index.js';
import { contextLengthOf, type ResolvedModel } from '../models/registry.js';
import type { ConversationSession, ConversationSessions } from './completions.js';
import type { ChatRequest } from './schemas.js';

/**
 * `store: true` (SPEC.md 4.2): the conversation (given as an id string or `{id}`, or created when
 * absent) lends its history — the project instruction first as the system message, then the stored
 * messages of the active branch, trimmed oldest-first to fit the model's context — and receives the
 * latest input message and the assistant answer through the conversations domain's `appendItems`,
 * which emits `message.sent` once per stored message.
 */

type Message = ChatRequest['messages'][number];

/** A content part as it may appear in a chat message or a stored item (only these fields are read). */
interface ContentPart {
  type?: string;
  text?: unknown;
  image_url?: string | { url?: string };
  [field: string]: unknown;
}

/** The image a stored part holds (`input_image` as chat stores it, or the nested `image` kind), if any. */
function imageOf(part: ContentPart | null): { url: string; detail?: string } | null {
  if (!part || typeof part !== 'object') return null;
  const nested = part.image as { url?: unknown; detail?: unknown } | undefined;
  const url = typeof part.image_url === 'string' ? part.image_url : typeof part.image_url?.url === 'string' ? part.image_url.url : typeof nested?.url === 'string' ? nested.url : undefined;
  if (!url || (part.type !== 'input_image' && part.type !== 'image_url' && part.type !== 'image' && !nested)) return null;
  const detail = typeof part.detail === 'string' ? part.detail : typeof nested?.detail === 'string' ? nested.detail : undefined;
  return detail ? { url, detail } : { url };
}

/**
 * A stored message item → a chat message, or null (other item types, and messages without text or
 * images, are not replayed). A user message that stored images (the only role whose chat content
 * takes them) is replayed with them as `image_url` parts holding what was stored (a `jan_` id or
 * `data:<mime>;jan_…` placeholder), so the media step resolves them to download URLs exactly as on
 * the turn that sent them; text-only messages stay plain strings.
 */
function historyMessage(item: HistoryItem): Message | null {
  if (item.type !== 'message') return null;
  const role = item.role as Message['role'];
  if (!['user', 'assistant', 'system', 'developer'].includes(role)) return null;
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

/**
 * Keeps system messages and the request's own messages, then the stored turns newest first while
 * they fit: the oldest are dropped, and the history is read no further than the first that does not
 * fit (a conversation longer than the context costs what the context holds, not its length).
 */
export async function fitToContext(system: Message[], newestFirst: AsyncIterable<HistoryItem>, current: Message[], budget: number): Promise<Message[]> {
  const used = estimateTokensOf(system) + estimateTokensOf(current);
  const kept = await keepNewest(replayed(newestFirst), estimateTokens, budget - used);
  return [...system, ...kept, ...current];
}

async function* replayed(newestFirst: AsyncIterable<HistoryItem>): AsyncGenerator<Message> {
  for await (const item of newestFirst) {
    const message = historyMessage(item);
    if (message) yield message;
  }
}

/** The chat form of a message → an item the conversations domain accepts. */
function toItem(message: Message): Record<string, unknown> {
  const role = message.role === 'function' ? 'tool' : message.role;
  if (typeof message.content === 'string') return { type: 'message', role, content: message.content };
  const parts = ((message.content ?? []) as ContentPart[]).map((part) => {
    if (part.type === 'text') return { type: 'input_text', text: typeof part.text === 'string' ? part.text : '' };
    if (part.type === 'image_url') {
      const detail = typeof part.image_url === 'object' ? (part.image_url as { detail?: unknown }).detail : undefined;
      // The detail is kept so a later turn replays the image as it was asked for.
      return { type: 'input_image', image_url: typeof part.image_url === 'string' ? part.image_url : part.image_url?.url, ...(typeof detail === 'string' ? { detail } : {}) };
    }
    return part;
  });
  return { type: 'message', role, content: parts };
}

/**
 * `storeMessage` rewrites the message about to be stored (with `store: true`), e.g. inline images
 * uploaded as media and replaced by their `jan_` references; the request sent upstream is unchanged.
 */
export function createStoreHooks(
  ctx: ServiceContext,
  options: { conversations: ConversationDeps; storeMessage?: (principal: Principal, message: Message) => Promise<Message> },
): ConversationSessions {
  const knex = ctx.runtime.db.knex;
  const clock = ctx.runtime.clock;
  return {
    async prepare(input, principal, model: ResolvedModel): Promise<ConversationSession> {
      const ref = typeof input.conversation === 'string' ? input.conversation : input.conversation?.id;
      const given = input.messages[input.messages.length - 1]!;
      const latest = input.store === true && options.storeMessage ? await options.storeMessage(principal, given) : given;
      let conversationId = ref;
      if (!conversationId) {
        // Only reached with store: true (the caller asks for a session without a conversation only then).
        const title = contentText(latest.content).slice(0, 80) || null;
        conversationId = (await createConversation(options.conversations, principal.userId, { title } as never)).id;
      }
      const { conversation, newestFirst } = await openHistory(knex, { conversationId, userId: principal.userId });
      const system: Message[] = [];
      if (conversation.project_id) {
        const project = await findProject(knex, conversation.project_id, principal.userId);
        if (project?.instruction) system.push({ role: 'system', content: project.instruction } as Message);
      }
      const context = contextLengthOf(model) ?? Number.POSITIVE_INFINITY;
      const reserve = input.max_completion_tokens ?? input.max_tokens ?? 0;
      const messages = await fitToContext(system, newestFirst(), input.messages, context - reserve);
      const session: ConversationSession = {
        messages,
        conversation: { id: conversation.id, title: conversation.title },
        projectId: conversation.project_id ?? null,
        async finish(answer) {
          const assistant: Record<string, unknown> = {
            type: 'message',
            role: 'assistant',
            status: answer.status,
            content: [{ type: 'output_text', text: answer.content, annotations: [] }],
          };
          const stored: Record<string, unknown>[] = [toItem(latest), assistant];
          if (input.store_reasoning && answer.reasoning) stored.splice(1, 0, { type: 'reasoning', status: answer.status, summary: [{ type: 'summary_text', text: answer.reasoning }] });
          try {
            await appendItems(knex, {
              conversationId: conversation.id,
              userId: principal.userId,
              items: stored,
              model: answer.model,
              tokensUsed: answer.usage ? { prompt: answer.usage.prompt_tokens, completion: answer.usage.completion_tokens } : null,
              clock,
            });
          } catch (error) {
            if (error instanceof ApiError && error.status === 400) {
              // The latest message had parts the item schema refuses: keep its text instead.
              await appendItems(knex, {
                conversationId: conversation.id,
                userId: principal.userId,
                items: [{ type: 'message', role: latest.role === 'function' ? 'tool' : latest.role, content: contentText(latest.content) || '(non-text content)' }, ...stored.slice(1)],
                model: answer.model,
                tokensUsed: answer.usage ? { prompt: answer.usage.prompt_tokens, completion: answer.usage.completion_tokens } : null,
                clock,
              });
              return;
            }
            throw error;
          }
        },
      };
      return session;
    },
  };
}
