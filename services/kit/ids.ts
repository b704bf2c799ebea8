import { randomUUID } from 'node:crypto';
import { randomBase62 } from './secrets.js';

/**
 * Prefixed, URL-safe, unguessable identifiers. The body is 24 base62 characters (~143 bits) from a
 * cryptographic source. Every prefix the platform mints is here (the ones ARCHITECTURE.md fixes, then
 * the others clients see); media IDs belong to the media service.
 */
export const ID_PREFIXES = {
  conversation: 'conv',
  message: 'msg',
  project: 'proj',
  user: 'user',
  apiKey: 'key',
  provider: 'prov',
  event: 'evt',
  webhook: 'wh',
  response: 'resp',
  /** Output and input items of a response besides messages (the Responses API's prefixes). */
  functionCall: 'fc',
  functionCallOutput: 'fco',
  reasoning: 'rs',
  mcpListTools: 'mcpl',
  mcpCall: 'mcp',
  /** A model of the catalog, a provider's offer of it, and a provider sync run. */
  catalogModel: 'mc',
  providerModel: 'pmdl',
  syncRun: 'psync',
  /** One delivery of an event to a webhook. */
  webhookDelivery: 'whd',
  /** A document of the file search index (when the caller names none). */
  document: 'doc',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

const ID_BODY_LENGTH = 24;
const ID_PATTERN = /^[a-z]+_[0-9A-Za-z]{24}$/;

export function newId(kind: IdKind): string {
  return `${ID_PREFIXES[kind]}_${randomBase62(ID_BODY_LENGTH)}`;
}

/** A chat completion's id (`chatcmpl-` and a UUID, as OpenAI's), for answers the platform makes itself. */
export function completionId(): string {
  return `chatcmpl-${randomUUID()}`;
}

/** True when `value` looks like an id of `kind` (cheap syntactic check before a lookup). */
export function isId(kind: IdKind, value: unknown): value is string {
  return typeof value === 'string' && value.startsWith(`${ID_PREFIXES[kind]}_`) && ID_PATTERN.test(value);
}

/** Client request ids that are safe to log and echo; anything else is replaced by a fresh UUID. */
const ACCEPTABLE_REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

/**
 * The X-Request-ID a client (or the edge) sent, when it is a sane token; otherwise a new one. The
 * one rule for the edge, both plugin hosts and every service, so an id survives every hop.
 */
export function acceptRequestId(sent: string | undefined): string {
  return sent !== undefined && ACCEPTABLE_REQUEST_ID.test(sent) ? sent : randomUUID();
}
