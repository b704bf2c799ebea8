import type { IncomingMessage } from 'node:http';
import { ApiError } from '../errors.js';
import { DEFAULT_JSON_MAX_DEPTH, assertStorableRequestStrings, parseJsonText } from '../validation.js';
import { scanJsonMembers, type RawJsonMembers } from '../json-members.js';
import { decodeValidUtf8 } from '../strings.js';

/**
 * Reads JSON bodies with a per-route size limit. Each failure has its own answer in shape A
 * (`{"error":{"type","code","message","param","request_id"}}`): 413 over the limit (checked against
 * Content-Length before reading, and while reading), 415 for a non-JSON content type or a
 * compressed body (a `Content-Encoding` other than identity), 400 for a body that is not valid UTF-8
 * (nothing is replaced), for malformed JSON, for JSON nested deeper than `maxDepth` (checked before parsing) and for strings no
 * database can store (NUL, unpaired surrogates; see `parseJsonText`). `checkRequestStrings` applies the
 * same string rule to the path segments and the query. `mountRoutes` calls both for every route
 * whose entry does not leave the body unread (`body: 'stream'`: multipart uploads, proxies).
 */

export { parseSize } from '../config.js';

const isJsonType = (contentType: string) => /^application\/([\w.+-]*\+)?json\s*(;|$)/i.test(contentType);

export interface ReadBodyOptions {
  limit: number;
  /** Keep the raw bytes on `req.rawBody` (signature verification). */
  keepRaw?: boolean;
  /** Deepest nesting of arrays/objects accepted (`JSON_MAX_DEPTH`, default 64). */
  maxDepth?: number;
  /** Keep the bytes of these top-level members on `req.rawMembers`, where they can stand for them (`scanJsonMembers`). */
  rawMembers?: readonly string[];
}

/**
 * Refuses (400) a request whose path segments (ids) or query keys and values hold a string no
 * database can store. Run for every routed request, before its body is read.
 */
export function checkRequestStrings(path: string, query: unknown): void {
  assertStorableRequestStrings(path, query);
}

/**
 * The parsed JSON body of `req`, or undefined when there is none (GET, HEAD, OPTIONS, empty body).
 * Rejects with the ApiError to answer.
 */
export function readJsonBody(req: BodyRequest, options: ReadBodyOptions): Promise<unknown> {
  const method = req.method;
  if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS' || !hasBody(req)) return Promise.resolve(undefined);
  const contentType = req.headers['content-type'] ?? '';
  if (!isJsonType(contentType)) {
    req.resume();
    return Promise.reject(new ApiError(415, `Content-Type must be application/json (got "${contentType.slice(0, 60) || 'none'}")`, { param: 'Content-Type' }));
  }
  return new Promise((resolve, reject) => collectBody(req, options.limit, resolve, reject, options));
}

/**
 * The raw bytes of `req`'s body, up to `limit`: rejects with 413 when it is larger (by its
 * Content-Length before reading, or while reading; the rest is drained) and 400 when it cannot be
 * read. For a route that parses its body itself (`body: 'stream'`), as the MCP endpoint does.
 */
export function readRawBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => collectBody(req, limit, resolve as (value: unknown) => void, reject, null));
}

/**
 * One capped read for both readers, settling their promise once: with the bytes, or (`json` set)
 * with the parsed body. The parse happens here rather than in a callback of the JSON reader's, so
 * the read on every routed request makes no closure beyond its listeners.
 */
type BodyRequest = IncomingMessage & { rawBody?: Buffer; rawMembers?: RawJsonMembers };

function collectBody(
  req: BodyRequest,
  limit: number,
  resolve: (value: unknown) => void,
  reject: (error: unknown) => void,
  json: ReadBodyOptions | null,
): void {
  const encoding = req.headers['content-encoding'];
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
    // The limit counts the bytes as read, and the parser reads them as they are: a compressed body
    // would be refused as malformed JSON, or (inflated) slip past the size limit. Say which it is.
    req.resume();
    return reject(new ApiError(415, `Content-Encoding "${encoding.slice(0, 40)}" is not supported; send the body uncompressed`, { param: 'Content-Encoding' }));
  }
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return reject(bodyTooLarge(limit));
  }
  const chunks: Buffer[] = [];
  let received = 0;
  let failed = false;
  req.on('data', (chunk: Buffer) => {
    if (failed) return;
    received += chunk.length;
    if (received > limit) {
      failed = true;
      chunks.length = 0;
      reject(bodyTooLarge(limit));
      return;
    }
    chunks.push(chunk);
  });
  req.on('error', (error) => {
    if (failed) return;
    failed = true;
    reject(new ApiError(400, 'The request body could not be read', { param: 'body', cause: error }));
  });
  req.on('end', () => {
    if (failed) return;
    const raw = Buffer.concat(chunks, received);
    // The listeners stay on the request for as long as it runs (a stream: minutes), and with them
    // this closure: the received chunks are let go now that they are copied.
    chunks.length = 0;
    if (!json) return resolve(raw);
    if (json.keepRaw) req.rawBody = raw;
    // Refused, not repaired: U+FFFD in place of the bytes sent would be stored and forwarded as if
    // the client had written it.
    const text = decodeValidUtf8(raw);
    if (text === undefined) return reject(new ApiError(400, 'The request body is not valid UTF-8', { param: 'body' }));
    if (text.trim() === '') return resolve(undefined);
    const maxDepth = json.maxDepth ?? DEFAULT_JSON_MAX_DEPTH;
    try {
      // One pass over the bytes measures the nesting and finds the route's members, before the parse.
      const scanned = scanJsonMembers(raw, maxDepth, json.rawMembers ?? NO_MEMBERS);
      const value = parseJsonText(text, { maxDepth, depth: scanned.depth, bytes: raw });
      if (json.rawMembers) req.rawMembers = scanned.members;
      resolve(value);
    } catch (error) {
      reject(error);
    }
  });
}

const NO_MEMBERS: readonly string[] = [];

function hasBody(req: { headers: Record<string, string | string[] | undefined> }): boolean {
  const length = req.headers['content-length'];
  if (length !== undefined) return Number(length) > 0;
  return req.headers['transfer-encoding'] !== undefined;
}

/** 413 for a body over a route's limit, in the words every reader uses. */
export const bodyTooLarge = (limit: number) =>
  new ApiError(413, `Request body exceeds the limit of ${limit} bytes for this route`, { param: 'body' });
