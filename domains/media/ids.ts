import { randomBytes } from 'node:crypto';
import type { Clock } from '../../services/kit/core/index.js';

/**
 * Media ids: `jan_` followed by a lowercase ULID (26 characters of Crockford base32): 48 bits of
 * milliseconds, so ids sort by creation time, then 80 random bits from a cryptographic source.
 */
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
export const MEDIA_ID_PATTERN = /^jan_[0-9abcdefghjkmnpqrstvwxyz]{26}$/;
/** Finds ids inside longer strings (placeholders such as `data:image/png;jan_…`). */
export const MEDIA_ID_SOURCE = 'jan_[0-9abcdefghjkmnpqrstvwxyz]{26}';

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
  return `jan_${timePart}${randomPart}`;
}

export const isMediaId = (value: unknown): value is string => typeof value === 'string' && MEDIA_ID_PATTERN.test(value);
