import { isAscii, isUtf8, transcode } from 'node:buffer';

/** From this length on, non-ASCII UTF-8 decodes faster through ICU's transcoder than through V8's decoder. */
const LARGE_TEXT = 8192;

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
 * `text` without the run of `char` (one UTF-16 unit) it ends with. A scan from the end: `/x+$/` is
 * tried from every `x` and runs to the end each time, quadratic in a run of them that does not end
 * the text ("====…=A"), so a request of a few hundred KB would hold the event loop for minutes.
 */
export function trimTrailing(text: string, char: string): string {
  const code = char.charCodeAt(0);
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === code) end--;
  return end === text.length ? text : text.slice(0, end);
}

/**
 * `bytes.toString('utf8')`, faster for large text that is not all ASCII. V8's UTF-8 decoder slows
 * down more than in proportion to the length once any character is not ASCII (40 KiB of a chat's
 * history: ~47 µs, where ICU's transcoder and a UTF-16 copy take ~17; at 8 KiB they are even).
 * Valid UTF-8 decodes to the same string either way; anything else keeps V8's replacement rules.
 */
export function decodeUtf8(bytes: Buffer): string {
  if (bytes.length < LARGE_TEXT || isAscii(bytes) || !isUtf8(bytes)) return bytes.toString('utf8');
  return transcode(bytes, 'utf8', 'ucs2').toString('ucs2');
}

/**
 * `decodeUtf8` for bytes that must be valid UTF-8 (a client's JSON body): undefined when they are
 * not, rather than a string in which U+FFFD stands for what the bytes held. The check is the same
 * SIMD pass `decodeUtf8` makes before transcoding a large text, so a large body is not read again;
 * a small one (all ASCII, as most are) takes one more pass of a few KiB. A byte order mark is kept,
 * as `toString` keeps it.
 */
export function decodeValidUtf8(bytes: Buffer): string | undefined {
  if (isAscii(bytes)) return bytes.toString('utf8');
  if (!isUtf8(bytes)) return undefined;
  return bytes.length < LARGE_TEXT ? bytes.toString('utf8') : transcode(bytes, 'utf8', 'ucs2').toString('ucs2');
}
