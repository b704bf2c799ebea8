import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

// `crypto.hash` (Node ≥ 20.12) is the one-shot digest: no Hash object per call, on a path that
// hashes a presented key or token on every request. Asked for hex, it answers in a V8 string; asked
// for a Buffer, Node allocates a fresh backing store per call, which cost ~1.5× the hex form in the
// platform's profile. So digests are compared as the bytes of their hex form (latin1: one byte per
// character), written into a scratch buffer: the same constant-time comparison of fixed-length values.
const sha256HexBytes = (value: string | Buffer, into: Buffer): Buffer => {
  into.write(hash('sha256', value, 'hex'), 'latin1');
  return into;
};
const DIGEST_HEX_LENGTH = 64;
// Single-threaded: each comparison fills and reads these before anything else runs.
const scratchA = Buffer.alloc(DIGEST_HEX_LENGTH);
const scratchB = Buffer.alloc(DIGEST_HEX_LENGTH);

/** Constant-time comparison of two secrets of any length (hashing first hides the length). */
export function safeEqual(a: string, b: string): boolean {
  return timingSafeEqual(sha256HexBytes(a, scratchA), sha256HexBytes(b, scratchB)) && a.length === b.length;
}

/**
 * `safeEqual` against one fixed secret, its hash made once: a check per request (the gateway token)
 * then hashes only what was presented. Same constant-time comparison, same answers.
 */
export function secretMatcher(expected: string): (presented: string) => boolean {
  const expectedHash = sha256HexBytes(expected, Buffer.alloc(DIGEST_HEX_LENGTH));
  return (presented) => timingSafeEqual(sha256HexBytes(presented, scratchA), expectedHash) && presented.length === expected.length;
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
