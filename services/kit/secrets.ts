import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** Constant-time comparison of two secrets of any length (hashing first hides the length). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

/**
 * `safeEqual` against one fixed secret, its hash made once: a check per request (the gateway token)
 * then hashes only what was presented. Same constant-time comparison, same answers.
 */
export function secretMatcher(expected: string): (presented: string) => boolean {
  const expectedHash = createHash('sha256').update(expected).digest();
  return (presented) => timingSafeEqual(createHash('sha256').update(presented).digest(), expectedHash) && presented.length === expected.length;
}

export const sha256Hex = (value: string | Buffer): string => createHash('sha256').update(value).digest('hex');

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` characters of base62 from a cryptographic source, without modulo bias. */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const bytes = randomBytes(Math.ceil((length - out.length) * 1.3) + 4);
    for (const byte of bytes) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}
