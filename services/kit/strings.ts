import { isAscii, isUtf8, transcode } from 'node:buffer';

/**
 * True when `text` starts with one of `prefixes`. A loop rather than `prefixes.some((p) => …)`,
 * which makes a closure (over `text`) on every call: the identity plugin asks it for every header
 * of every request, and the edge's service for every request's path.
 */
export function startsWithAny(text: string, prefixes: readonly string[]): boolean {
  for (const prefix of prefixes) if (text.startsWith(prefix)) return true;
  return false;
}

/**
 * `bytes.toString('utf8')`, faster for large text that is not all ASCII. V8's UTF-8 decoder slows
 * down more than in proportion to the length once any character is not ASCII (40 KiB of a chat's
 * history: ~47 µs, where ICU's transcoder and a UTF-16 copy take ~17; at 8 KiB they are even).
 * Valid UTF-8 decodes to the same string either way; anything else keeps V8's replacement rules.
 */
export function decodeUtf8(bytes: Buffer): string {
  if (bytes.length < 8192 || isAscii(bytes) || !isUtf8(bytes)) return bytes.toString('utf8');
  return transcode(bytes, 'utf8', 'ucs2').toString('ucs2');
}
