/**
 * Fitting a history to a model's context window: chat completions do it for a stored
 * conversation, the Responses API for `truncation: "auto"`. Tokens are estimated, not counted (no
 * tokenizer is loaded for every model a provider serves): 4 characters of text per token, plus 4
 * per message for the framing providers add, plus the JSON of any tool calls. An image part costs a
 * fixed `TOKENS_PER_IMAGE` whatever its URL (a data URL's length says nothing of what a provider
 * charges for it); another part without text (a file) costs its JSON only when the message has
 * neither text nor an image.
 */

const CHARS_PER_TOKEN = 4;
const TOKENS_PER_MESSAGE = 4;
/** What OpenAI charges for a high-detail 1024×1024 image (85 + 4 tiles × 170): a typical image's cost. */
export const TOKENS_PER_IMAGE = 765;
const IMAGE_PART_TYPES = new Set(['image_url', 'input_image', 'image']);
/**
 * The `detail` values of an image part the chat API takes. A request naming another is refused; a
 * stored part holding another (the conversations API keeps items as sent) is replayed without it.
 */
export const IMAGE_DETAILS: ReadonlySet<string> = new Set(['auto', 'low', 'high']);

function imagePartCount(content: unknown): number {
  if (!Array.isArray(content)) return 0;
  let images = 0;
  for (const part of content) if (typeof part === 'object' && part !== null && IMAGE_PART_TYPES.has((part as { type?: unknown }).type as string)) images++;
  return images;
}

/** A chat message as far as the estimate reads it (other fields are not read). */
export interface EstimatedMessage {
  content?: unknown;
  tool_calls?: unknown;
  [field: string]: unknown;
}

/**
 * The text of a message's content, as the model reads it: the content itself when it is a string,
 * else its parts' text joined — a part's `text` (`text`, `input_text`, `output_text`), an
 * assistant's `refusal` (part of that turn, so replayed, counted and summarised with it), or the
 * nested `output_text.text` some stored items carry. Parts without text (images, files) add nothing.
 * The one rule for token estimates, conversation titles, history replay and the research prompt.
 */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (const part of content) text += partText(part);
  return text;
}

function partText(part: unknown): string {
  if (typeof part !== 'object' || part === null) return '';
  const { text, refusal, output_text: nested } = part as { text?: unknown; refusal?: unknown; output_text?: { text?: unknown } };
  if (typeof text === 'string') return text;
  if (typeof refusal === 'string') return refusal;
  return typeof nested?.text === 'string' ? nested.text : '';
}

export function estimateTokens(message: EstimatedMessage): number {
  const images = imagePartCount(message.content);
  let chars = contentText(message.content).length;
  if (chars === 0 && images === 0) chars = JSON.stringify(message.content ?? '').length;
  const calls = message.tool_calls ? JSON.stringify(message.tool_calls).length : 0;
  return estimateTextTokens(chars + calls) + images * TOKENS_PER_IMAGE + TOKENS_PER_MESSAGE;
}

/**
 * The estimate for `chars` characters of text alone (no message framing): for text that was only
 * counted, not kept (a streamed answer's length, as llm-api's relay counts it for usage estimates).
 */
export function estimateTextTokens(chars: number): number {
  return Math.ceil(chars / CHARS_PER_TOKEN);
}

/** The estimate of several messages together. */
export function estimateTokensOf(messages: Iterable<EstimatedMessage>): number {
  let tokens = 0;
  for (const message of messages) tokens += estimateTokens(message);
  return tokens;
}

/**
 * The newest entries whose costs add up to at most `budget`, oldest first. Reading stops at the
 * first entry that does not fit, so a lazy source (a history read page by page) is read no further
 * than what is kept: a history longer than the context costs what the context holds.
 */
export async function keepNewest<T>(newestFirst: AsyncIterable<T> | Iterable<T>, cost: (entry: T) => number, budget: number): Promise<T[]> {
  const kept: T[] = [];
  let used = 0;
  for await (const entry of newestFirst) {
    const entryCost = cost(entry);
    if (used + entryCost > budget) break;
    used += entryCost;
    kept.push(entry);
  }
  return kept.reverse();
}
