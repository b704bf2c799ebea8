import type { z } from 'zod';
import { ApiError } from './errors.js';
import { scanJsonMembers } from './json-members.js';

/**
 * Request schemas are zod schemas; a violation becomes a 400 in shape A whose `param` names the
 * offending field in the form clients know from OpenAI (`messages[0].role`).
 */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown, root?: string): z.infer<S> {
  return parseValue(schema, input ?? {}, root, null);
}

/**
 * `parseInput` for a JSON request body. No body reads as `{}` (so the 400 names the first missing
 * field); a body that is JSON but not what the schema takes as a whole (an array, a string, a
 * number, `true`, `null` where an object is expected) is a 400 naming `body`, as the body reader
 * names every other refusal of the body as a whole (malformed, too deep, too large).
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  return parseValue(schema, body === undefined ? {} : body, undefined, 'body');
}

/** `whole`: the param of an issue with the input as a whole (no path), or null. */
function parseValue<S extends z.ZodType>(schema: S, input: unknown, root: string | undefined, whole: string | null): z.infer<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const { issue, path } = decisive(result.error.issues[0]!);
  const at = formatPath(root ? [root, ...path] : path);
  // An unknown field is the field to name, not the object that holds it.
  const param = issue.code === 'unrecognized_keys' && issue.keys.length > 0 ? formatPath(root ? [root, ...path, issue.keys[0]!] : [...path, issue.keys[0]!]) : at;
  throw new ApiError(400, describe(issue, at, valueAt(input, path) !== undefined), { param: param || whole });
}

/**
 * The issue to tell the caller. A value that fits no branch of a union is told by the branch that
 * got furthest into it (`stop[0]` for `"stop": [1, 2]`, not zod's bare "Invalid input" on `stop`);
 * where no branch got past the value itself, the union's own issue stays (see `describe`).
 */
function decisive(first: z.core.$ZodIssue): { issue: z.core.$ZodIssue; path: PropertyKey[] } {
  let issue = first;
  let path: PropertyKey[] = [...first.path];
  while (issue.code === 'invalid_union' && issue.errors.length > 0) {
    let furthest: z.core.$ZodIssue | undefined;
    for (const branch of issue.errors) {
      const candidate = branch[0];
      if (candidate && candidate.path.length > (furthest?.path.length ?? 0)) furthest = candidate;
    }
    if (!furthest) break;
    path = [...path, ...furthest.path];
    issue = furthest;
  }
  return { issue, path };
}

/** The value at `path` in `input`, or undefined where the path leads nowhere (only read for a refusal). */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let node = input;
  for (const key of path) {
    if (node === null || typeof node !== 'object' || !Object.prototype.hasOwnProperty.call(node, key)) return undefined;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  return node;
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out;
}

/**
 * `present`: the field is in the input. zod keeps no input on its issues unless asked, so a value of
 * the wrong type would otherwise read as a missing one.
 */
function describe(issue: z.core.$ZodIssue, param: string, present: boolean): string {
  const where = param ? `'${param}'` : 'the request body';
  switch (issue.code) {
    case 'invalid_type':
      return present ? `Invalid type for ${where}: ${issue.message}.` : `Missing required parameter: ${where}.`;
    case 'unrecognized_keys':
      return `Unrecognized parameter(s) in ${where}: ${issue.keys.join(', ')}.`;
    case 'invalid_union': {
      // No branch got past the value: name the kinds of value the branches take.
      const expected = issue.errors.map((branch) => (branch[0]?.code === 'invalid_type' && branch[0].path.length === 0 ? branch[0].expected : null));
      if (expected.length > 0 && expected.every((kind) => kind !== null)) return `Invalid type for ${where}: expected ${[...new Set(expected)].join(' or ')}.`;
      return `Invalid value for ${where}: ${issue.message}.`;
    }
    default:
      return `Invalid value for ${where}: ${issue.message}.`;
  }
}

/**
 * Strings that cannot be stored. PostgreSQL (and PGlite) refuse a NUL character in text and an
 * unpaired UTF-16 surrogate cannot be encoded as UTF-8, so either would surface as a database
 * error (a 500). The kit refuses both at the door, for every JSON body, path and query string.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Why `value` cannot be stored as text, or null when it can. */
export function unstorableStringReason(value: string): string | null {
  if (value.includes('\u0000')) return 'contains a NUL character';
  if (!isWellFormed(value)) return 'contains an unpaired UTF-16 surrogate';
  return null;
}

/** `String.prototype.isWellFormed` (native since Node 20) with a regular-expression fallback. */
const isWellFormed: (value: string) => boolean =
  typeof (String.prototype as { isWellFormed?: unknown }).isWellFormed === 'function'
    ? (value) => (value as string & { isWellFormed(): boolean }).isWellFormed()
    : (value) => !LONE_SURROGATE.test(value);

const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/** `String.prototype.toWellFormed` (native since Node 20): each unpaired surrogate becomes U+FFFD, as a URL or a UTF-8 encoder writes it. */
export const toWellFormed: (value: string) => string =
  typeof (String.prototype as { toWellFormed?: unknown }).toWellFormed === 'function'
    ? (value) => (value as string & { toWellFormed(): string }).toWellFormed()
    : (value) => value.replace(LONE_SURROGATES, '\ufffd');

/**
 * `value` made storable: each NUL and each unpaired surrogate becomes U+FFFD. For text the platform
 * did not take at its door but must keep, such as a provider's answer; an input is refused instead.
 * The common case is one scan that finds nothing, and the same string back.
 */
export function storableText(value: string): string {
  if (unstorableStringReason(value) === null) return value;
  return toWellFormed(value).replaceAll('\u0000', '\ufffd');
}

/** Keys that would reach an object's prototype when copied with `Object.assign` or spread into defaults. */
const FORBIDDEN_KEYS = new Set(['__proto__']);

/** The default and the bounds of the JSON nesting limit (`JSON_MAX_DEPTH`). */
export const DEFAULT_JSON_MAX_DEPTH = 64;

/**
 * Refuses what no handler can store safely anywhere in a parsed JSON value: NUL and unpaired
 * surrogates in strings and keys, `__proto__` keys, and numbers that do not fit a double (JSON
 * `1e400` parses to Infinity). The 400 names the offending field (`metadata.title`, `items[0].content`).
 * `value` must already be depth-checked (see `parseJsonText`), so the walk is bounded.
 * `stringsChecked`: every string and key is known to be storable already; only keys and numbers are checked.
 */
export function assertStorable(value: unknown, root: readonly PropertyKey[] = [], stringsChecked = false): void {
  // The path holds the keys as they are; only an error message makes them printable, so a body
  // that passes (every request) costs no rewrite of its keys.
  const path: PropertyKey[] = [...root];
  const walk = (node: unknown): void => {
    if (typeof node === 'string') {
      if (stringsChecked) return;
      const reason = unstorableStringReason(node);
      if (reason) throw new ApiError(400, `Invalid value for ${where(path)}: the string ${reason}.`, { param: paramOf(path) });
      return;
    }
    if (typeof node === 'number') {
      if (!Number.isFinite(node)) throw new ApiError(400, `Invalid value for ${where(path)}: the number is out of range.`, { param: paramOf(path) });
      return;
    }
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        path.push(i);
        walk(node[i]);
        path.pop();
      }
      return;
    }
    if (node && typeof node === 'object') {
      for (const key of Object.keys(node)) {
        path.push(key);
        const reason = FORBIDDEN_KEYS.has(key) ? 'is a reserved name' : stringsChecked ? null : unstorableStringReason(key);
        if (reason) throw new ApiError(400, `Invalid parameter name ${where(path)}: the name ${reason}.`, { param: paramOf(path) });
        walk((node as Record<string, unknown>)[key]);
        path.pop();
      }
    }
  };
  walk(value);
}

/** The offending text itself never goes back into messages, params or logs verbatim. */
const printable = (text: string) => text.replace(/[\u0000-\u001f\ud800-\udfff]/g, '\ufffd').slice(0, 200);
const printablePath = (path: readonly PropertyKey[]) => formatPath(path.map((part) => (typeof part === 'string' ? printable(part) : part)));
const paramOf = (path: readonly PropertyKey[]) => printablePath(path) || null;
const where = (path: readonly PropertyKey[]) => (path.length ? `'${printablePath(path)}'` : 'the request body');

/**
 * Parses JSON text after checking its nesting depth in one linear pass, so a document nested
 * thousands of levels deep is refused before anything recursive (`JSON.stringify`, a validator,
 * a database driver) touches it. Then applies `assertStorable`. Every failure is a 400 on `body`.
 * `bytes`: the UTF-8 bytes `text` was decoded from (a request body), when there are any.
 * A leading byte order mark is ignored, as RFC 8259 lets a parser do: some clients (Windows tools,
 * editors saving "UTF-8 with BOM") send one, and the text after it is the JSON they meant.
 */
export function parseJsonText(text: string, options: { maxDepth?: number; depth?: number; bytes?: Buffer } = {}): unknown {
  // One comparison on every body; the slice only for the rare body that carries the mark. The
  // bytes keep it: the depth scan and the escape search skip anything that is not JSON punctuation.
  text = withoutByteOrderMark(text);
  const maxDepth = options.maxDepth ?? DEFAULT_JSON_MAX_DEPTH;
  // `depth`: the nesting measured already (scanJsonMembers, by the body reader).
  if ((options.depth ?? jsonDepth(options.bytes ?? text, maxDepth)) > maxDepth) {
    throw new ApiError(400, `The JSON body is nested deeper than ${maxDepth} levels`, { param: 'body', code: 'json_too_deep' });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ApiError(400, `Malformed JSON in request body: ${jsonErrorWithoutText((error as Error).message, text)}`, { param: 'body' });
  }
  assertStorable(value, [], options.bytes !== undefined && options.bytes.indexOf(UNICODE_ESCAPE) === -1);
  return value;
}

const BYTE_ORDER_MARK = 0xfeff;

/** `text` without a leading byte order mark: what `parseJsonText` reads, for a caller that parses the same text another way. */
export const withoutByteOrderMark = (text: string): string => (text.charCodeAt(0) === BYTE_ORDER_MARK ? text.slice(1) : text);

/**
 * V8's message for an unexpected token quotes the text around it (`Unexpected token 'x', "{"password":x…" is
 * not valid JSON`): the sender's own secrets would come back in the answer, and into any log of it. Such
 * a message is replaced by the position of the error; V8's other messages quote nothing, and get the
 * position when they do not name one. Only on the failure path.
 */
function jsonErrorWithoutText(message: string, text: string): string {
  if (/is not valid JSON|Unexpected token/.test(message)) return `Unexpected token in JSON at position ${jsonSyntaxErrorOffset(text)}`;
  // "Unexpected end of JSON input" names no position: the end is where the text stops.
  return /at position \d+/.test(message) ? printable(message) : `${printable(message)} at position ${jsonSyntaxErrorOffset(text)}`;
}

/** The offset of the first syntax error in JSON text (its length when the text merely ends early). */
function jsonSyntaxErrorOffset(text: string): number {
  let i = 0;
  const space = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const sticky = (re: RegExp) => {
    re.lastIndex = i;
    const m = re.exec(text);
    if (!m) return false;
    i += m[0].length;
    return true;
  };
  const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
  const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  const LITERAL = /true|false|null/y;
  // The nesting was bounded before the parse, so this recursion is too.
  const value = (): boolean => {
    space();
    const c = text[i];
    if (c === '"') return sticky(STRING);
    if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']';
      i++;
      space();
      if (text[i] === close) return i++, true;
      for (;;) {
        if (c === '{') {
          space();
          if (text[i] !== '"' || !sticky(STRING)) return false;
          space();
          if (text[i] !== ':') return false;
          i++;
        }
        if (!value()) return false;
        space();
        if (text[i] === ',') i++;
        else if (text[i] === close) return i++, true;
        else return false;
      }
    }
    return sticky(NUMBER) || sticky(LITERAL);
  };
  if (value()) space();
  return Math.min(i, text.length);
}

/**
 * Text decoded from UTF-8 holds no unpaired surrogate (the decoder makes U+FFFD of what is not
 * UTF-8) and JSON text no raw NUL (JSON allows no raw control character): a parsed string can hold
 * either only through a `\u` escape. Bytes without one need no check of each string, which costs
 * more than the search (a chat's history is most of its body).
 */
const UNICODE_ESCAPE = Buffer.from('\\u');

/**
 * The deepest nesting of arrays and objects in JSON, outside string literals; stops counting as
 * soon as `stopAbove` is exceeded. Malformed JSON is left to `JSON.parse` to report. Counted on the
 * UTF-8 bytes (text is encoded first), by the scanner the body reader uses.
 */
export function jsonDepth(json: string | Buffer, stopAbove = Infinity): number {
  return scanJsonMembers(typeof json === 'string' ? Buffer.from(json) : json, stopAbove, NO_MEMBERS).depth;
}

const NO_MEMBERS: readonly string[] = [];

/**
 * Checks the parts of a request that reach handlers as strings outside the body: the path
 * segments (ids) once percent-decoded, and every query key and value. A segment that does not
 * decode (`%E0%A4`) or decodes to an unstorable string is a 400 naming `path`, or the query key.
 */
export function assertStorableRequestStrings(path: string, query: unknown): void {
  // Without percent-encoding each segment is the path's own text, and a NUL or an unpaired
  // surrogate is in a segment exactly when it is in the path (a '/' between two halves of a pair
  // leaves both unpaired): one check of the whole path, without splitting it, on every request.
  if (!path.includes('%')) {
    if (unstorableStringReason(path)) throw badPath();
  } else assertStorableSegments(path);
  if (query && typeof query === 'object') assertStorableQuery(query as Record<string, unknown>, []);
}

function assertStorableSegments(path: string): void {
  for (const segment of path.split('/')) {
    if (!segment.includes('%')) {
      if (unstorableStringReason(segment)) throw badPath();
      continue;
    }
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      throw new ApiError(400, 'The request path contains malformed percent-encoding', { param: 'path' });
    }
    if (unstorableStringReason(decoded)) throw badPath();
  }
}

const badPath = () => new ApiError(400, 'The request path contains a NUL character or an unpaired UTF-16 surrogate', { param: 'path' });

function assertStorableQuery(node: unknown, path: PropertyKey[], depth = 0): void {
  if (depth > 16) throw new ApiError(400, 'The query string is nested too deeply', { param: 'query' });
  if (typeof node === 'string') {
    const reason = unstorableStringReason(node);
    if (reason) throw new ApiError(400, `Invalid value for query parameter ${where(path)}: the string ${reason}.`, { param: paramOf(path) });
    return;
  }
  if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      const reason = unstorableStringReason(key);
      if (reason) throw new ApiError(400, `Invalid query parameter name: the name ${reason}.`, { param: 'query' });
      assertStorableQuery(value, [...path, Array.isArray(node) ? Number(key) : key], depth + 1);
    }
  }
}

/**
 * Characters as SPEC.md 2.2 and OpenAI's limits count them (and as PostgreSQL's `varchar(n)` does):
 * code points. A string's `length` counts UTF-16 units, two for an emoji, so a limit checked with it
 * refuses text of fewer characters than it allows.
 */
export function characterCount(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}
