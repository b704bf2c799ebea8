import { brotliDecompressSync, gunzipSync, inflateRawSync, inflateSync, type ZlibOptions } from 'node:zlib';
import { EgressRefusedError, type EgressGuard } from '../../kit/index.js';
import { ToolFailure } from '../tools/tool.js';
import type { Extracted } from './extract.js';
import { ExtractionTimeout, extractHtmlInThread } from './extract-thread.js';

/**
 * Fetches a user-supplied URL through the kit's egress guard (the resolved address is checked and
 * then connected to, every redirect is checked again, private/loopback/metadata destinations are
 * refused unless listed in EGRESS_ALLOW_HOSTS), with a timeout and a size cap enforced while the
 * body streams in. HTML becomes readable text or Markdown; other text is returned as is; binary
 * content is refused.
 */
export interface ScrapeDeps {
  egress: EgressGuard;
  timeoutMs: number;
  maxBytes: number;
}

export interface Page {
  url: string;
  final_url: string;
  title: string;
  content: string;
  truncated: boolean;
}

/** Media types (parameters already stripped) read as text: any text/*, these application/* and any `+json`/`+xml` suffix. The whole type must match. */
const TEXT_TYPES = /^(?:text\/[a-z0-9!#$&^_.+-]+|application\/(?:json|xml|javascript|ecmascript|x-ndjson|ld\+json|rss\+xml|atom\+xml|x-yaml|yaml|toml|csv)|[a-z]+\/[a-z0-9!#$&^_.+-]*\+(?:json|xml))$/i;
const HTML_TYPES = /^(text\/html|application\/xhtml\+xml)$/i;

export async function fetchPage(deps: ScrapeDeps, url: string, format: 'text' | 'markdown', maxChars: number, signal: AbortSignal, userId: string): Promise<Page> {
  // The guard's `timeoutMs` is the socket's idle time: a server dripping a byte now and then (or
  // redirecting slowly) would hold the call, and its concurrency slot, for as long as it likes.
  // SCRAPE_TIMEOUT_MS bounds the whole fetch, every redirect, host name lookup (the guard stops
  // waiting for a slow name server when the signal aborts) and the body included.
  const deadline = AbortSignal.timeout(deps.timeoutMs);
  const stop = AbortSignal.any([signal, deadline]);
  let response;
  try {
    response = await deps.egress.request(url, {
      headers: { 'user-agent': 'mcp-tools-scrape/1.0 (+https://modelcontextprotocol.io)', accept: 'text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5' },
      timeoutMs: deps.timeoutMs,
      maxBytes: deps.maxBytes,
      signal: stop,
    });
  } catch (error) {
    // A cancel is no failure of the page: rethrown as it is, the call's own cancel path answers it,
    // in the same words as every other tool's.
    if (signal.aborted) throw error;
    if (deadline.aborted) throw new ToolFailure(`The page did not answer within ${deps.timeoutMs} ms`);
    throw new ToolFailure(describeFetchError(error, deps));
  }
  if (response.status >= 400) throw new ToolFailure(`The page answered HTTP ${response.status}`);
  // The guard follows every redirect that names a Location (and refuses one too many itself): a
  // 3xx left over is no redirect at all (304 Not Modified, 300 without a Location).
  if (response.status >= 300) throw new ToolFailure(`The page answered HTTP ${response.status} (a 3xx without a Location header to follow), not a page`);
  const contentType = String(response.headers['content-type'] ?? '');
  const mime = contentType.split(';')[0]!.trim().toLowerCase();
  const body = decodeContent(response.body, String(response.headers['content-encoding'] ?? ''), deps.maxBytes);
  // A byte order mark names the encoding over any header or <meta> declaration, as browsers read it
  // (a UTF-16 text file saved on Windows is often served as text/plain with no charset).
  const declared = bomEncoding(body) ?? charsetOf(contentType);
  // UTF-16 text is full of zero bytes: when the page declares it, the declaration is believed.
  const looksBinary = !/^utf-16(le|be)?$/.test(declared ?? '') && body.subarray(0, 4096).includes(0);
  if ((mime && !TEXT_TYPES.test(mime)) || looksBinary) {
    throw new ToolFailure(`Binary content is not supported (${mime || 'unknown type'}); scrape reads HTML and text pages`);
  }
  // A page that declares its encoding only in a <meta> (legacy windows-1252, Shift_JIS, GBK pages
  // often do) is read in it, as a browser would, not as UTF-8.
  const text = decode(body, declared ?? (!mime || HTML_TYPES.test(mime) ? metaCharset(body) : undefined));
  const isHtml = HTML_TYPES.test(mime) || (!mime && /^\s*(<!doctype html|<html)/i.test(text));
  // Other text is returned as it is (line ends aside): indentation is meaning in source, YAML and
  // Markdown, and tabs separate the columns of TSV.
  const extracted = isHtml ? await readHtml(deps, text, response.url, format, signal, userId) : { title: '', content: text.replace(/\r\n?/g, '\n') };
  const truncated = extracted.content.length > maxChars;
  // The title is the page's to choose: one line (as a browser shows it), and never longer than the
  // content the caller allowed (a page can make its <title> megabytes long).
  const title = extracted.title.replace(/\s+/g, ' ').trim();
  const titleMax = Math.min(maxChars, TITLE_MAX_CHARS);
  return {
    url,
    final_url: response.url,
    title: title.length > titleMax ? cutAt(title, titleMax) : title,
    content: truncated ? cutAt(extracted.content, maxChars) : extracted.content,
    truncated,
  };
}

/** The readable part of an HTML page, read off the service's thread within SCRAPE_TIMEOUT_MS (extract-thread.ts). */
async function readHtml(deps: ScrapeDeps, html: string, url: string, format: 'text' | 'markdown', signal: AbortSignal, userId: string): Promise<Extracted> {
  try {
    return await extractHtmlInThread(html, url, format, { timeoutMs: deps.timeoutMs, signal, userId });
  } catch (error) {
    if (error instanceof ExtractionTimeout) throw new ToolFailure(`The page is too complex to read within ${deps.timeoutMs} ms`);
    if (signal.aborted) throw error;
    throw new ToolFailure(`The page could not be read (${String((error as Error).message).slice(0, 120)})`);
  }
}

/**
 * The body as the page meant it. scrape asks for no compression (no Accept-Encoding), but some
 * servers compress anyway; read raw, such a page would be refused as binary. The decoded size is
 * bounded by SCRAPE_MAX_BYTES like the bytes on the wire (a small compressed body can inflate a
 * thousandfold).
 */
function decodeContent(body: Buffer, contentEncoding: string, maxBytes: number): Buffer {
  const codings = contentEncoding.toLowerCase().split(',').map((c) => c.trim()).filter((c) => c && c !== 'identity');
  const options: ZlibOptions = { maxOutputLength: maxBytes };
  let out = body;
  // Codings are listed in the order they were applied: undone last first.
  for (const coding of codings.reverse()) {
    try {
      if (coding === 'gzip' || coding === 'x-gzip') out = gunzipSync(out, options);
      else if (coding === 'br') out = brotliDecompressSync(out, options);
      else if (coding === 'deflate') out = inflateDeflate(out, options);
      else throw new ToolFailure(`The page is compressed with "${coding.slice(0, 40)}", which scrape cannot read`);
    } catch (error) {
      if (error instanceof ToolFailure) throw error;
      if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw new ToolFailure(`The page is larger than ${maxBytes} bytes`);
      throw new ToolFailure(`The page's ${coding} compression is corrupt`);
    }
  }
  return out;
}

/** HTTP's "deflate" is zlib-wrapped; some servers send the raw stream instead. */
function inflateDeflate(body: Buffer, options: ZlibOptions): Buffer {
  try {
    return inflateSync(body, options);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw error;
    return inflateRawSync(body, options);
  }
}

/**
 * The first `max` UTF-16 units of `text`, one fewer when the cut would fall inside a surrogate pair:
 * half a pair is not text (UTF-8 cannot encode it; the kit refuses such strings as unstorable).
 */
function cutAt(text: string, max: number): string {
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

/** The most characters of a page's title scrape returns (fewer when `max_chars` is smaller). */
const TITLE_MAX_CHARS = 1000;

/** The encoding a byte order mark at the start of `body` names, or undefined. */
function bomEncoding(body: Buffer): string | undefined {
  if (body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf) return 'utf-8';
  if (body[0] === 0xff && body[1] === 0xfe) return 'utf-16le';
  if (body[0] === 0xfe && body[1] === 0xff) return 'utf-16be';
  return undefined;
}

const charsetOf = (contentType: string) => /charset\s*=\s*"?([\w.:-]+)/i.exec(contentType)?.[1]?.toLowerCase();

/**
 * The encoding an HTML page declares in a <meta> within its first 1024 bytes (the HTML standard's
 * prescan: `<meta charset=…>` or `<meta http-equiv="Content-Type" content="…; charset=…">`). A
 * UTF-16 declaration there cannot be true (the bytes read it as ASCII) and is read as UTF-8. (A
 * byte order mark was looked for first: `bomEncoding`.)
 */
function metaCharset(body: Buffer): string | undefined {
  const head = body.subarray(0, 1024).toString('latin1');
  for (const [tag] of head.matchAll(/<meta\b[^>]*>/gi)) {
    const charset = /charset\s*=\s*["']?\s*([\w.:-]+)/i.exec(tag)?.[1]?.toLowerCase();
    if (charset) return charset.startsWith('utf-16') ? 'utf-8' : charset;
  }
  return undefined;
}

function decode(body: Buffer, declared: string | undefined): string {
  const charset = declared ?? 'utf-8';
  try {
    return new TextDecoder(charset).decode(body);
  } catch {
    return new TextDecoder('utf-8').decode(body);
  }
}

function describeFetchError(error: unknown, deps: ScrapeDeps): string {
  if (error instanceof EgressRefusedError) return `The URL is not allowed: ${error.reason}`;
  const err = error as NodeJS.ErrnoException;
  if (err.code === 'E_TOO_LARGE') return `The page is larger than ${deps.maxBytes} bytes`;
  if (err.code === 'ETIMEDOUT') return `The page did not answer within ${deps.timeoutMs} ms`;
  if (err.code === 'ECONNREFUSED') return 'The site refused the connection';
  if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') return 'The host name does not resolve';
  return `The page could not be fetched (${err.code ?? 'network error'})`;
}
