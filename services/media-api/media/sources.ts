import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { Request } from 'express';
import busboy from 'busboy';
import { ApiError, bodyTooLarge, EgressRefusedError, TOO_MANY_REDIRECTS, trimTrailing, type EgressGuard } from '../../kit/index.js';

/**
 * Where upload bytes come from: a URL (through the kit's egress guard), base64, a data URL, or a
 * multipart `file` part. Each reader stops at the size limit: nothing beyond it is buffered.
 */
export interface SourceLimits {
  maxBytes: number;
  fetchTimeoutMs: number;
  maxRedirects: number;
}

const tooLarge = (maxBytes: number, param: string) =>
  new ApiError(400, `The image exceeds the size limit of ${maxBytes} bytes`, { param });

export async function fetchSource(guard: EgressGuard, url: string, limits: SourceLimits, signal: AbortSignal): Promise<Buffer> {
  const param = 'source.url';
  const deadline = AbortSignal.any([signal, AbortSignal.timeout(limits.fetchTimeoutMs)]);
  try {
    const response = await guard.request(url, {
      headers: { accept: 'image/*', 'user-agent': 'media-api/1.0' },
      timeoutMs: limits.fetchTimeoutMs,
      maxRedirects: limits.maxRedirects,
      maxBytes: limits.maxBytes,
      signal: deadline,
    });
    if (response.status >= 300 && response.status < 400) {
      // The guard follows redirects that name a Location; a 3xx left over is either one redirect
      // too many or an answer that is no redirect at all (304 Not Modified, 300 without Location).
      if (!response.headers?.location) throw new ApiError(400, `The URL answered HTTP ${response.status} (a 3xx without a Location header to follow), not an image`, { param });
      throw new ApiError(400, `The URL redirected more than ${limits.maxRedirects} times`, { param });
    }
    if (response.status < 200 || response.status >= 300) {
      throw new ApiError(400, `The URL answered HTTP ${response.status}`, { param });
    }
    return await decodeContent(response.body, response.headers['content-encoding'], limits.maxBytes, param, deadline, limits.fetchTimeoutMs);
  } catch (error) {
    if (error instanceof ApiError) throw error;
    if (error instanceof EgressRefusedError) {
      // The guard refuses the redirect past the limit itself: said as the docs say it, with the limit.
      if (error.reason === TOO_MANY_REDIRECTS) throw new ApiError(400, `The URL redirected more than ${limits.maxRedirects} times`, { param });
      throw new ApiError(400, `The URL is not allowed: ${error.reason}`, { param });
    }
    const code = (error as { code?: string; name?: string }).code;
    if (code === 'E_TOO_LARGE') throw tooLarge(limits.maxBytes, param);
    if (deadline.aborted && !signal.aborted) throw new ApiError(400, `The URL did not answer within ${limits.fetchTimeoutMs} ms`, { param });
    throw new ApiError(400, 'The URL could not be fetched', { param, cause: error });
  }
}

const gunzip = promisify(zlib.gunzip);
const inflate = promisify(zlib.inflate);
const inflateRaw = promisify(zlib.inflateRaw);
const brotliDecompress = promisify(zlib.brotliDecompress);
/** A zlib stream's two-byte header (RFC 1950): method 8 (deflate), and the pair a multiple of 31. */
const hasZlibHeader = (body: Buffer) => body.length >= 2 && (body[0]! & 0x0f) === 8 && ((body[0]! << 8) | body[1]!) % 31 === 0;
type Decoder = (body: Buffer, options: zlib.ZlibOptions & zlib.BrotliOptions) => Promise<Buffer>;
// A Map: a coding named like an object's own member (`constructor`) is no decoder.
const DECODERS = new Map<string, Decoder>([
  ['gzip', gunzip],
  ['x-gzip', gunzip],
  // `deflate` is zlib-wrapped by the standard; some servers send it raw. Told apart by the header,
  // so a wrapped stream's failure (its output past the limit) is never retried as raw.
  ['deflate', (body, options) => (hasZlibHeader(body) ? inflate(body, options) : inflateRaw(body, options))],
  ['br', brotliDecompress],
]);
/**
 * Layers undone at most: each is a pass of the thread pool over up to the size limit, and a header
 * may name thousands (undici stops at 5 as well); servers send one.
 */
const MAX_CODINGS = 5;

/**
 * The body as the server meant it: a server may compress it although it was not asked to (an
 * object stored gzipped with `Content-Encoding: gzip` is served so to every client, and browsers
 * show it), so the codings are undone, the output cut at the size limit (no decompression bomb
 * gets past it).
 */
async function decodeContent(body: Buffer, header: string | undefined, maxBytes: number, param: string, deadline: AbortSignal, timeoutMs: number): Promise<Buffer> {
  const codings = (header ?? '').split(',').map((coding) => coding.trim().toLowerCase()).filter((coding) => coding && coding !== 'identity');
  if (codings.length > MAX_CODINGS) throw new ApiError(400, `The URL answered with ${codings.length} Content-Encoding layers (at most ${MAX_CODINGS} are read)`, { param });
  let out = body;
  for (const coding of codings.reverse()) {
    const decode = DECODERS.get(coding);
    if (!decode) throw new ApiError(400, `The URL answered with a Content-Encoding that cannot be read (${coding.slice(0, 40)})`, { param });
    // The fetch's deadline bounds the decoding too, checked between layers.
    if (deadline.aborted) throw new ApiError(400, `The URL did not answer within ${timeoutMs} ms`, { param });
    try {
      out = await decode(out, { maxOutputLength: maxBytes });
    } catch (error) {
      if ((error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(maxBytes, param);
      throw new ApiError(400, `The URL's body could not be decoded (Content-Encoding ${coding})`, { param });
    }
  }
  return out;
}

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * Strict base64 (standard or URL-safe alphabet; whitespace ignored; padding optional, but when
 * present exactly what completes the last group); size checked before decoding.
 */
export function decodeBase64(data: string, maxBytes: number, param: string): Buffer {
  const compact = data.replace(/\s+/g, '');
  const unpadded = trimTrailing(compact, '=');
  if (!BASE64.test(compact) || unpadded.length % 4 === 1 || (compact.length > unpadded.length && compact.length % 4 !== 0)) {
    throw new ApiError(400, 'The data is not valid base64', { param });
  }
  if (Math.floor((unpadded.length * 3) / 4) > maxBytes) throw tooLarge(maxBytes, param);
  return Buffer.from(compact, compact.includes('-') || compact.includes('_') ? 'base64url' : 'base64');
}

const DATA_URL_PREFIX = /^\s*data:([\w.+-]+\/[\w.+-]+)?((?:;[\w.+-]+=[^;,]*)*);base64,/i;

/** `data:<mime>;base64,<data>` → bytes (the claimed type is ignored: the decoder decides). */
export function decodeDataUrl(dataUrl: string, maxBytes: number, param: string): Buffer {
  const match = DATA_URL_PREFIX.exec(dataUrl);
  if (!match) throw new ApiError(400, 'Expected a data URL of the form data:<mime type>;base64,<data>', { param });
  return decodeBase64(dataUrl.slice(match[0].length), maxBytes, param);
}

/**
 * The `base64` source: plain base64, or a whole data URL pasted into it (what many clients send
 * as "base64"); its prefix goes like a `data_url` source's, its claimed type ignored alike.
 */
export function decodeBase64Source(data: string, maxBytes: number, param: string): Buffer {
  return /^\s*data:/i.test(data) ? decodeDataUrl(data, maxBytes, param) : decodeBase64(data, maxBytes, param);
}

/** Parts a multipart upload may have, the `file` part and every field included. */
export const MAX_MULTIPART_PARTS = 12;

/**
 * Reads the `file` part (and an optional `filename` field) of a multipart body, stopping at
 * `maxBytes`: a larger part ends the request with 400 without reading the rest into memory.
 * Parts with other names (files or fields) are skipped; a second `file` part, a body cut off
 * before its closing boundary and any other malformed body are 400s naming `file`. Every stream
 * busboy hands out has an error listener, so no malformed body can raise an unhandled 'error'.
 */
export function readMultipart(req: Request, maxBytes: number, maxBodyBytes = maxBytes + 1024 * 1024): Promise<{ bytes: Buffer; filename: string | null }> {
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      // defParamCharset: browsers and curl send raw UTF-8 in `filename="…"` (busboy defaults to latin1).
      // No `files` limit: busboy would count every file part whatever its name; the one-file rule
      // is for the `file` part and is enforced below (`parts` bounds the number of parts).
      // busboy signals `partsLimit` when a part *reaches* the limit (and drops fields past `fields`
      // silently), so the limit given is one more than the parts allowed: the part past the bound
      // is refused, and no field within it is lost (a `filename` field among them included).
      parser = busboy({
        headers: req.headers,
        defParamCharset: 'utf8',
        limits: { fileSize: maxBytes, fields: MAX_MULTIPART_PARTS, fieldSize: 4096, parts: MAX_MULTIPART_PARTS + 1 },
      });
    } catch {
      reject(new ApiError(400, 'Malformed multipart/form-data request (boundary missing)', { param: 'file' }));
      return;
    }
    const malformed = () => new ApiError(400, 'Malformed multipart/form-data body (truncated or not well-formed)', { param: 'file' });
    let file: Buffer | null = null;
    let filePart = false;
    let filename: string | null = null;
    let failed = false;
    const fail = (error: ApiError) => {
      if (failed) return;
      failed = true;
      req.unpipe(parser);
      req.resume();
      reject(error);
    };
    parser.on('file', (name, stream, info) => {
      // Any stream may be destroyed with an error (a body ending inside the part): always listen.
      stream.on('error', () => fail(malformed()));
      if (name !== 'file') {
        stream.resume();
        return;
      }
      if (filePart) {
        stream.resume();
        fail(new ApiError(400, "Only one 'file' part is allowed", { param: 'file' }));
        return;
      }
      filePart = true;
      const chunks: Buffer[] = [];
      let size = 0;
      stream.on('data', (chunk: Buffer) => {
        if (failed) return;
        size += chunk.length;
        chunks.push(chunk);
      });
      stream.on('limit', () => fail(tooLarge(maxBytes, 'file')));
      stream.on('end', () => {
        if (failed) return;
        file = Buffer.concat(chunks, size);
        filename ??= info.filename || null;
      });
    });
    parser.on('field', (name, value) => {
      // A part is a file only with a non-empty `filename=` (or Content-Type application/octet-stream);
      // busboy drops `filename=""` as if absent and reads even an image as a text field, without
      // saying which it was. The message covers both, rather than saying the part is missing.
      if (name === 'file') {
        fail(new ApiError(400, "The 'file' part must be a file part: send it with a non-empty filename (Content-Disposition: form-data; name=\"file\"; filename=\"…\"); a part with no filename or filename=\"\" is read as a text field unless its Content-Type is application/octet-stream", { param: 'file' }));
        return;
      }
      if (name === 'filename' && value) filename = value;
    });
    // The whole body is bounded too (other parts are skipped, not buffered, but still read).
    let received = 0;
    req.on('data', (chunk: Buffer) => {
      received += chunk.length;
      if (received > maxBodyBytes) fail(bodyTooLarge(maxBodyBytes));
    });
    // A client that goes away mid-body: the request errors and never ends, so the parser would
    // never close and the upload would wait for ever (with its buffered part).
    req.on('error', () => fail(new ApiError(400, 'The request body could not be read (the connection closed before it ended)', { param: 'file' })));
    parser.on('partsLimit', () => fail(new ApiError(400, 'Too many parts in the multipart body', { param: 'file' })));
    parser.on('error', () => fail(malformed()));
    parser.on('close', () => {
      if (failed) return;
      if (!file) return fail(new ApiError(400, "Missing required part: 'file'", { param: 'file' }));
      resolve({ bytes: file, filename });
    });
    req.pipe(parser);
  });
}

// C0 and C1 controls, DEL, and the bidirectional embedding/override (U+202A–U+202E) and isolate
// (U+2066–U+2069) characters, which make a name display as something else ("\u202Egnp.exe").
// eslint-disable-next-line no-control-regex
const UNSAFE_FILENAME_CHARS = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
// A surrogate that is not half of a pair (valid pairs, e.g. emoji, are kept).
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * A display name: the last path segment, without control characters, bidirectional overrides and
 * isolates or lone surrogates, at most 255 characters (code points: a pair is never split); no
 * name when nothing, `.` or `..` is left.
 */
export function cleanFilename(name: string | null | undefined): string | null {
  if (!name) return null;
  const base = name.split(/[\\/]/).pop() ?? '';
  const clean = Array.from(base.replace(UNSAFE_FILENAME_CHARS, '').replace(LONE_SURROGATE, '').trim()).slice(0, 255).join('').trim();
  // `.` and `..` name directories, not a file: a client saving under this name must not get a path.
  return clean && clean !== '.' && clean !== '..' ? clean : null;
}
