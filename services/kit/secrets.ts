import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

// `crypto.hash` (Node ≥ 20.12) is the one-shot digest: no Hash object per call, on a path that
// hashes a presented key or token on every request.
const sha256 = (value: string | Buffer): Buffer => hash('sha256', value, 'buffer');

/** Constant-time comparison of two secrets of any length (hashing first hides the length). */
export function safeEqual(a: string, b: string): boolean {
  return timingSafeEqual(sha256(a), sha256(b)) && a.length === b.length;
}

/**
 * `safeEqual` against one fixed secret, its hash made once: a check per request (the gateway token)
 * then hashes only what was presented. Same constant-time comparison, same answers.
 */
export function secretMatcher(expected: string): (presented: string) => boolean {
  const expectedHash = sha256(expected);
  return (presented) => timingSafeEqual(sha256(presented), expectedHash) && presented.length === expected.length;
}

export const sha256Hex = (value: string | Buffer): string => hash('sha256', value, 'hex');

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
