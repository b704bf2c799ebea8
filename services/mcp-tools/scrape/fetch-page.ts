import { EgressRefusedError, type EgressGuard } from '../../kit/index.js';
import { ToolFailure } from '../tools/tool.js';
import { extractHtml, normaliseText } from './extract.js';

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

const TEXT_TYPES = /^(text\/|application\/(json|xml|javascript|ecmascript|x-ndjson|ld\+json|rss\+xml|atom\+xml|x-yaml|yaml|toml|csv)|[a-z]+\/[a-z0-9.+-]*\+(json|xml)$)/i;
const HTML_TYPES = /^(text\/html|application\/xhtml\+xml)$/i;

export async function fetchPage(deps: ScrapeDeps, url: string, format: 'text' | 'markdown', maxChars: number, signal: AbortSignal): Promise<Page> {
  let response;
  try {
    response = await deps.egress.request(url, {
      headers: { 'user-agent': 'mcp-tools-scrape/1.0 (+https://modelcontextprotocol.io)', accept: 'text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5' },
      timeoutMs: deps.timeoutMs,
      maxBytes: deps.maxBytes,
      signal,
    });
  } catch (error) {
    throw new ToolFailure(describeFetchError(error, deps));
  }
  if (response.status >= 400) throw new ToolFailure(`The page answered HTTP ${response.status}`);
  if (response.status >= 300) throw new ToolFailure(`The page redirected too often or without a usable Location (HTTP ${response.status})`);
  const contentType = String(response.headers['content-type'] ?? '');
  const mime = contentType.split(';')[0]!.trim().toLowerCase();
  const body = response.body;
  const looksBinary = body.subarray(0, 4096).includes(0);
  if ((mime && !TEXT_TYPES.test(mime)) || (!mime && looksBinary) || looksBinary) {
    throw new ToolFailure(`Binary content is not supported (${mime || 'unknown type'}); scrape reads HTML and text pages`);
  }
  const text = decode(body, contentType);
  const isHtml = HTML_TYPES.test(mime) || (!mime && /^\s*(<!doctype html|<html)/i.test(text));
  const extracted = isHtml ? extractHtml(text, response.url, format) : { title: '', content: normaliseText(text) };
  const truncated = extracted.content.length > maxChars;
  return {
    url,
    final_url: response.url,
    title: extracted.title,
    content: truncated ? extracted.content.slice(0, maxChars) : extracted.content,
    truncated,
  };
}

function decode(body: Buffer, contentType: string): string {
  const charset = /charset\s*=\s*"?([\w.:-]+)/i.exec(contentType)?.[1] ?? 'utf-8';
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
  if (err.name === 'AbortError') return 'The request was cancelled';
  if (err.code === 'ECONNREFUSED') return 'The site refused the connection';
  if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') return 'The host name does not resolve';
  return `The page could not be fetched (${err.code ?? 'network error'})`;
}
