import { containsMediaId, createInternalClient, MEDIA_REFUSALS, relayError, resolveMediaReferences, type Principal } from '../../kit/index.js';
import type { MessageStep } from './completions.js';
import type { ChatRequest } from './schemas.js';

/**
 * Media in chat, through media-api's ordinary routes called service to service (straight to its
 * internal address with the caller's identity and the gateway token, never through the public edge):
 * - `resolveStep`: before dispatch, `jan_…` references in the messages (`image_url.url` ids and
 *   `data:<mime>;jan_…` placeholders) become download URLs (`POST /v1/media/resolve`). A reference
 *   the caller does not own is a 404 naming it.
 * - `storeInlineImages`: with `store: true`, inline base64 / data-URL images of the message being
 *   stored are uploaded as media (`POST /v1/media/upload`), and the stored copy holds
 *   `data:<mime>;jan_<id>` instead of the base64, so a conversation stays small in PostgreSQL.
 */
type Message = ChatRequest['messages'][number];
const INLINE_IMAGE = /^data:[\w.+-]+\/[\w.+-]+(;[\w.+-]+=[^;,]*)*;base64,/i;

export interface MediaPort {
  resolveStep: MessageStep;
  storeInlineImages(principal: Principal, message: Message, signal?: AbortSignal): Promise<Message>;
}

export function createMediaPort(options: { baseUrl: () => string; gatewayToken: string; timeoutMs: number }): MediaPort & { close(): Promise<void> } {
  const client = createInternalClient(options);
  return {
    // Synchronous for messages without a reference (nearly all): no promise to wait for.
    resolveStep(principal, messages) {
      if (!containsMediaId(messages)) return messages;
      return resolveMediaReferences(client, principal, messages, { param: 'messages' });
    },

    async storeInlineImages(principal, message) {
      if (!Array.isArray(message.content)) return message;
      const parts = await Promise.all(
        (message.content as Array<Record<string, any>>).map(async (part, index) => {
          const url = part?.type === 'image_url' ? (typeof part.image_url === 'string' ? part.image_url : part.image_url?.url) : undefined;
          if (typeof url !== 'string' || !INLINE_IMAGE.test(url)) return part;
          const res = await client.call<any>('POST', '/v1/media/upload', { principal, body: { source: { type: 'data_url', data_url: url } } });
          if (res.status !== 200 && res.status !== 201) relayError(res, { what: 'Storing an inline image', param: `messages.content[${index}].image_url`, statuses: MEDIA_REFUSALS });
          const reference = `data:${res.body.mime_type};${res.body.id}`;
          return { ...part, image_url: typeof part.image_url === 'string' ? reference : { ...part.image_url, url: reference } };
        }),
      );
      return { ...message, content: parts } as Message;
    },

    close: () => client.close(),
  };
}
