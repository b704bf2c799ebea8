import { randomBase62 } from './secrets.js';

/**
 * Prefixed, URL-safe, unguessable identifiers. The body is 24 base62 characters (~143 bits) from a
 * cryptographic source. Prefixes are the ones ARCHITECTURE.md fixes; media IDs belong to the media service.
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
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

const ID_BODY_LENGTH = 24;
const ID_PATTERN = /^[a-z]+_[0-9A-Za-z]{24}$/;

export function newId(kind: IdKind): string {
  return `${ID_PREFIXES[kind]}_${randomBase62(ID_BODY_LENGTH)}`;
}

/** True when `value` looks like an id of `kind` (cheap syntactic check before a lookup). */
export function isId(kind: IdKind, value: unknown): value is string {
  return typeof value === 'string' && value.startsWith(`${ID_PREFIXES[kind]}_`) && ID_PATTERN.test(value);
}
