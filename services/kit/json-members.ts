import { isUtf8 } from 'node:buffer';

/**
 * The bytes of some top-level members of a JSON request body, as they arrived, so a handler that
 * forwards those members unchanged need not serialise them again. A chat request's `messages` (a
 * conversation's history) and `tools` are most of its body, and most of what a gateway spends on a
 * large request: JSON.stringify of 200 KiB of messages took longer than parsing them.
 *
 * The bytes stand for a member only where the parsed body cannot hold anything else: a body that
 * is valid UTF-8 (otherwise the parsed strings hold U+FFFD where the bytes hold something else), is
 * one object, and names no wanted member twice nor any member with an escape in its name (JSON.parse
 * keeps the last of two equal names, and `"messag\u0065s"` is `messages`). A value the parse refused
 * never gets here: the body was parsed and checked (`parseJsonText`) before any handler runs.
 */
export class RawJsonMembers {
  constructor(
    private readonly bytes: Buffer,
    private readonly spans: ReadonlyMap<string, readonly [start: number, end: number]>,
  ) {}

  /** The member's value as it arrived (an object or an array), or undefined. */
  get(name: string): Buffer | undefined {
    const span = this.spans.get(name);
    return span && this.bytes.subarray(span[0], span[1]);
  }
}

/** What one pass over a JSON body's bytes finds: its nesting depth and the wanted members' bytes. */
export interface ScannedJson {
  depth: number;
  members: RawJsonMembers | undefined;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The deepest nesting of arrays and objects in `bytes`, outside string literals (it stops counting
 * above `stopAbove`), and the bytes of the values of `wanted` top-level members that are objects or
 * arrays (none wanted: the depth alone, what `jsonDepth` reports). Every byte that matters here is ASCII, which never occurs inside a multi-byte
 * UTF-8 sequence, so the bytes are scanned without decoding. Malformed JSON is left to the parse.
 */
export function scanJsonMembers(bytes: Buffer, stopAbove: number, wanted: readonly string[]): ScannedJson {
  let depth = 0;
  let deepest = 0;
  let usable = true;
  let expectName = false;
  let member: string | undefined;
  let valueStart = -1;
  const spans = new Map<string, readonly [number, number]>();
  const seen = new Set<string>();
  const length = bytes.length;
  for (let i = 0; i < length; i++) {
    const c = bytes[i]!;
    if (c === QUOTE) {
      // A string: jump to its closing quote (one not escaped by an odd run of backslashes).
      let from = i + 1;
      let quote: number;
      for (;;) {
        quote = bytes.indexOf(QUOTE, from);
        if (quote === -1) return { depth: deepest, members: undefined }; // unterminated: the parse reports it
        let backslashes = 0;
        for (let k = quote - 1; k > i && bytes[k] === BACKSLASH; k--) backslashes++;
        if (backslashes % 2 === 0) break;
        from = quote + 1;
      }
      if (depth === 1 && expectName && usable) {
        expectName = false;
        member = memberName(bytes, i + 1, quote, wanted);
        if (member === ESCAPED) usable = false;
        else if (member !== undefined) {
          if (seen.has(member)) usable = false;
          seen.add(member);
        }
      }
      i = quote;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > stopAbove) return { depth: deepest, members: undefined };
      }
      if (depth === 1) {
        if (c === 0x5b) usable = false; // not an object
        expectName = true;
      } else if (depth === 2) valueStart = i;
    } else if (c === 0x7d || c === 0x5d) {
      if (depth === 2 && member !== undefined && member !== ESCAPED) spans.set(member, [valueStart, i + 1]);
      depth--;
    } else if (c === 0x2c && depth === 1) {
      expectName = true;
      member = undefined;
    }
  }
  return { depth: deepest, members: usable && spans.size > 0 && isUtf8(bytes) ? new RawJsonMembers(bytes, spans) : undefined };
}

/** Marks a member name written with an escape: it may spell any name, a wanted one included. */
const ESCAPED = '\\';

/** The wanted name `bytes[start, end)` spells, ESCAPED, or undefined for any other name. */
function memberName(bytes: Buffer, start: number, end: number, wanted: readonly string[]): string | undefined {
  // A loop over the name, not `indexOf`: that would search the rest of the body when the name has no escape.
  for (let i = start; i < end; i++) if (bytes[i] === BACKSLASH) return ESCAPED;
  for (const name of wanted) {
    if (name.length === end - start && bytes.toString('latin1', start, end) === name) return name;
  }
  return undefined;
}

/**
 * `value` as JSON bytes, with each of `names` whose value is still the one the request carried
 * (`value[name] === request[name]`, the same object) written as the bytes it arrived as. The
 * other members are serialised as usual; the forwarded ones come first.
 */
export function encodeWithRawMembers(value: Record<string, unknown>, request: object, names: readonly string[], raw: RawJsonMembers | undefined): string | Buffer {
  if (!raw) return JSON.stringify(value);
  const parts: Buffer[] = [];
  const forwarded: string[] = [];
  for (const name of names) {
    const member = value[name];
    if (member === null || typeof member !== 'object' || member !== (request as Record<string, unknown>)[name]) continue;
    const bytes = raw.get(name);
    if (!bytes) continue;
    parts.push(Buffer.from(`${forwarded.length ? ',' : '{'}${JSON.stringify(name)}:`), bytes);
    forwarded.push(name);
  }
  if (!forwarded.length) return JSON.stringify(value);
  const rest: Record<string, unknown> = {};
  for (const key in value) if (!forwarded.includes(key)) rest[key] = value[key];
  const others = JSON.stringify(rest);
  parts.push(Buffer.from(others.length > 2 ? `,${others.slice(1)}` : '}'));
  return Buffer.concat(parts);
}
