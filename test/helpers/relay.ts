import type { Readable } from 'node:stream';
import { relayStream, type RelayOptions } from '../../services/llm-api/chat/stream.js';
import { answerFrom } from './provider-answer.js';

/**
 * The relay over a provider answer whose first read is `first` and whose rest is `body`, with the
 * options a plain chat request has (no usage asked, nothing stored); `options` overrides them.
 */
export function startRelay(first: string | Uint8Array, body: Readable, options: Partial<RelayOptions> = {}) {
  return relayStream({
    firstChunk: typeof first === 'string' ? Buffer.from(first) : first,
    rest: answerFrom(body),
    clientWantsUsage: false,
    collect: false,
    requestId: 'req_test',
    maxEventBytes: 1 << 16,
    signal: new AbortController().signal,
    onUpstreamError: () => {},
    ...options,
  });
}
