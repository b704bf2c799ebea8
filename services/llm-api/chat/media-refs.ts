import { ApiError, createInternalClient, type InternalClient, type Principal } from '../../kit/index.js';
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
const REFERENCE = /jan_[0-9abcdefghjkmnpqrstvwxyz]{26}/;
const INLINE_IMAGE = /^data:[\w.+-]+\/[\w.+-]+(;[\w.+-]+=[^;,]*)*;base64,/i;

/**
 * Whether any string of the messages (keys included) holds a `jan_` reference: what testing their
 * JSON text would say (a reference has no character JSON escapes, and no reference spans two
 * strings), without serialising every request's messages to find out. The messages are parsed
 * JSON, nested no deeper than the body's depth limit.
 */
function mentionsMedia(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('jan_') && REFERENCE.test(value);
  if (Array.isArray(value)) return value.some(mentionsMedia);
  if (value !== null && typeof value === 'object') {
    for (const key in value) if (mentionsMedia(key) || mentionsMedia((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}

export interface MediaPort {
  resolveStep: MessageStep;
  storeInlineImages(principal: Principal, message: Message, signal?: AbortSignal): Promise<Message>;
}

export function createMediaPort(options: { baseUrl: () => string; gatewayToken: string; timeoutMs: number }): MediaPort & { close(): Promise<void> } {
  // media-api's address is known only once it listens (port 0 in tests): the client is made on first use.
  let client: { url: string; client: InternalClient } | null = null;
  const call = (method: string, path: string, principal: Principal, body: unknown) => {
    const url = options.baseUrl();
    if (!client || client.url !== url) {
      void client?.client.close();
      client = { url, client: createInternalClient({ baseUrl: url, gatewayToken: options.gatewayToken, timeoutMs: options.timeoutMs }) };
    }
    return client.client.call<any>(method, path, { principal, body });
  };

  const fail = (status: number, body: any, param: string): never => {
    const message = typeof body?.error?.message === 'string' ? body.error.message : 'The media service refused the request';
    if (status === 404 || status === 400 || status === 413) throw new ApiError(status, message, { param });
    throw new ApiError(502, 'The media service failed', { param });
  };

  return {
    // Synchronous for messages without a reference (nearly all): no promise to wait for.
    resolveStep(principal, messages) {
      if (!mentionsMedia(messages)) return messages;
      return call('POST', '/v1/media/resolve', principal, { payload: messages }).then((res) => {
        if (res.status !== 200) fail(res.status, res.body, 'messages');
        return res.body.payload as Message[];
      });
    },

    async storeInlineImages(principal, message) {
      if (!Array.isArray(message.content)) return message;
      const parts = await Promise.all(
        (message.content as Array<Record<string, any>>).map(async (part, index) => {
          const url = part?.type === 'image_url' ? (typeof part.image_url === 'string' ? part.image_url : part.image_url?.url) : undefined;
          if (typeof url !== 'string' || !INLINE_IMAGE.test(url)) return part;
          const res = await call('POST', '/v1/media/upload', principal, { source: { type: 'data_url', data_url: url } });
          if (res.status !== 200 && res.status !== 201) fail(res.status, res.body, `messages.content[${index}].image_url`);
          const reference = `data:${res.body.mime_type};${res.body.id}`;
          return { ...part, image_url: typeof part.image_url === 'string' ? reference : { ...part.image_url, url: reference } };
        }),
      );
      return { ...message, content: parts } as Message;
    },

    async close() {
      await client?.client.close();
    },
  };
}
