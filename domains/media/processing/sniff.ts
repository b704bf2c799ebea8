/**
 * What the first bytes say, before any decoder runs: used to tell "not an image" from "a corrupt
 * image" in error messages. The real type always comes from the decoder (sharp), never from this
 * or from the client's claim.
 */
const SIGNATURES: Array<[string, (b: Buffer) => boolean]> = [
  ['image/jpeg', (b) => b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ['image/png', (b) => b.length >= 8 && b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))],
  ['image/gif', (b) => b.length >= 6 && /^GIF8[79]a$/.test(b.subarray(0, 6).toString('latin1'))],
  ['image/webp', (b) => b.length >= 12 && b.subarray(0, 4).toString('latin1') === 'RIFF' && b.subarray(8, 12).toString('latin1') === 'WEBP'],
];

export function looksLikeImage(bytes: Buffer): string | null {
  for (const [mime, test] of SIGNATURES) if (test(bytes)) return mime;
  return null;
}

/** sharp's format names → MIME types of the formats this service stores. */
export const FORMAT_MIME: Record<string, string> = { jpeg: 'image/jpeg', png: 'image/png', webp: 'image/webp', gif: 'image/gif' };
