import { randomBytes } from 'node:crypto';
import type { Clock } from './clock.js';

/**
 * Media ids (ARCHITECTURE.md, "Media IDs"): `jan_` followed by a lowercase ULID, 26 characters of
 * Crockford base32: 48 bits of milliseconds, so ids sort by creation time, then 80 random bits from
 * a cryptographic source. The format lives in the kit because services other than media-api find
 * references in what they are sent (llm-api's chat messages, response-api's input) and may not
 * import domains/media.
 */
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
export const MEDIA_ID_PREFIX = 'jan_';
/** One media id, for building patterns that find ids inside longer strings (`data:image/png;jan_…`). */
export const MEDIA_ID_SOURCE = 'jan_[0-9abcdefghjkmnpqrstvwxyz]{26}';
/** A whole string that is a media id (the literal is what the OpenAPI document shows as the pattern). */
export const MEDIA_ID_PATTERN = /^jan_[0-9abcdefghjkmnpqrstvwxyz]{26}$/;
const MEDIA_ID_INSIDE = new RegExp(MEDIA_ID_SOURCE);

export function newMediaId(clock: Clock): string {
  let time = clock.now();
  let timePart = '';
  for (let i = 0; i < 10; i++) {
    timePart = ALPHABET[time % 32] + timePart;
    time = Math.floor(time / 32);
  }
  const bytes = randomBytes(10);
  let bits = 0n;
  for (const byte of bytes) bits = (bits << 8n) | BigInt(byte);
  let randomPart = '';
  for (let i = 0; i < 16; i++) {
    randomPart = ALPHABET[Number(bits & 31n)] + randomPart;
    bits >>= 5n;
  }
  return `${MEDIA_ID_PREFIX}${timePart}${randomPart}`;
}

export const isMediaId = (value: unknown): value is string => typeof value === 'string' && MEDIA_ID_PATTERN.test(value);

/**
 * Whether any string of a parsed JSON value (object keys included) holds a media id: what testing
 * its JSON text would say (an id has no character JSON escapes, and no id spans two strings),
 * without serialising the value to find out. The value is parsed JSON, nested no deeper than the
 * body's depth limit.
 */
export function containsMediaId(value: unknown): boolean {
  if (typeof value === 'string') return value.includes(MEDIA_ID_PREFIX) && MEDIA_ID_INSIDE.test(value);
  if (Array.isArray(value)) return value.some(containsMediaId);
  if (value !== null && typeof value === 'object') {
    for (const key in value) if (containsMediaId(key) || containsMediaId((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}
