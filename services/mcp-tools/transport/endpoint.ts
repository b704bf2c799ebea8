import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { isJsonContentType } from '@modelcontextprotocol/sdk/shared/mediaType.js';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { Request, Response } from 'express';
import { ApiError, decodeValidUtf8, parseJsonText, readRawBody, whenClosed, withoutByteOrderMark, type Logger } from '../../kit/index.js';
import { JSONRPC, sendJsonRpcError } from './jsonrpc.js';
import { ARGUMENT_ERRORS_AS_RESULTS_SINCE, createRequestServer, type McpServerDeps } from './mcp-server.js';
import { screenMessages } from './screen.js';

/**
 * POST /v1/mcp: one JSON-RPC message (or batch) in, one answer out. The SDK's web-standard
 * Streamable HTTP transport runs stateless (`sessionIdGenerator: undefined`), on a fresh protocol
 * server per request, with JSON answers (`enableJsonResponse: true`) but for one case: a lone
 * tools/call whose `_meta` carries a `progressToken`, from a client whose Accept names
 * `text/event-stream`, is answered with an SSE stream (its progress notifications, then its
 * result), as a JSON answer could carry the result only.
 *
 * Two forms are accepted: the SDK client's (`Accept: application/json, text/event-stream`) and a
 * plain JSON-RPC POST (`Accept: application/json`, or none). Every other answer is
 * `application/json`, so the transport is always told the client takes both. The body is read
 * here, not by the transport, so malformed JSON is a JSON-RPC parse error rather than the
 * platform's HTTP error body.
 */
export interface McpEndpointDeps extends McpServerDeps {
  bodyLimit: number;
  /** `JSON_MAX_DEPTH`: deeper bodies are refused before they are parsed (as on every other route). */
  jsonMaxDepth: number;
  logger: Logger;
}

const OPEN_BRACKET = Buffer.from('[');
const CLOSE_BRACKET = Buffer.from(']');

export async function handleMcpPost(deps: McpEndpointDeps, userId: string, req: Request, res: Response): Promise<void> {
  // Numbered as it arrives, before its body is read: a cancel overtaking a call of this POST is kept for it.
  const admission = deps.callTool.admit(userId);
  try {
    await servePost(deps, userId, admission, req, res);
  } finally {
    deps.callTool.release(userId, admission);
  }
}

async function servePost(deps: McpEndpointDeps, userId: string, admission: number, req: Request, res: Response): Promise<void> {
  let raw: Buffer;
  try {
    raw = await readRawBody(req, deps.bodyLimit);
  } catch (error) {
    // Too large or compressed is a JSON-RPC error like the parse errors below; a body that cannot
    // be read at all is the platform's 400.
    if (error instanceof ApiError && error.status === 413) return sendJsonRpcError(res, 413, JSONRPC.serverError, `Request body exceeds the limit of ${deps.bodyLimit} bytes`);
    if (error instanceof ApiError && error.status === 415) return sendJsonRpcError(res, 415, JSONRPC.serverError, error.message);
    throw error;
  }
  // The answer is JSON (an SSE stream only for a client that asked for progress and names
  // text/event-stream itself): a client that takes neither JSON nor a wildcard covering it (`*/*`,
  // `application/*`) cannot be answered (no Accept: anything goes). A client accepting only
  // text/event-stream is refused too: without a progressToken its answer would be JSON.
  if (!acceptsJson(req.headers.accept)) return sendJsonRpcError(res, 406, JSONRPC.serverError, 'Not Acceptable: the answer is application/json; send Accept: application/json, text/event-stream');
  // The media type first, as the transport judges it: a body that is not declared JSON is a 415,
  // whatever it holds (not a parse or invalid-request error from reading it as JSON regardless).
  if (!isJsonContentType(req.headers['content-type'] ?? null)) return sendJsonRpcError(res, 415, JSONRPC.serverError, 'Unsupported Media Type: Content-Type must be application/json');
  // Refused, not repaired: U+FFFD in place of the bytes sent would reach a tool as the client's text.
  const text = decodeValidUtf8(raw);
  if (text === undefined) return sendJsonRpcError(res, 400, JSONRPC.parseError, 'Parse error: the body is not valid UTF-8');
  let message: unknown;
  let unstorable = false;
  try {
    message = parseJsonText(text, { maxDepth: deps.jsonMaxDepth, bytes: raw });
  } catch (error) {
    if (error instanceof ApiError && error.code === 'json_too_deep') return sendJsonRpcError(res, 400, JSONRPC.invalidRequest, `Invalid Request: ${error.message}`);
    // JSON holding a value the platform refuses (a NUL or an unpaired surrogate in a string, a number
    // out of range) is still JSON: not a parse error. The screen answers each message holding one,
    // with its id, as invalid params naming the field.
    const parsed = parseWellFormed(withoutByteOrderMark(text));
    if (!parsed) return sendJsonRpcError(res, 400, JSONRPC.parseError, `Parse error: ${(error as Error).message}`);
    message = parsed.value;
    unstorable = true;
  }
  const screened = screenMessages(message, { checkValues: unstorable });
  if (screened.forward === null) {
    // Nothing left to serve or answer (notifications dropped here): accepted, as notifications are.
    if (screened.errors.length === 0) {
      res.status(202).end();
      return;
    }
    // Nothing left for the protocol server: the answers made here are the whole answer.
    const answer = Array.isArray(message) && !screened.invalid ? screened.errors : screened.errors[0];
    res.status(screened.invalid ? 400 : 200).json(answer);
    return;
  }
  const disconnected = new AbortController();
  whenClosed(res, () => {
    if (!res.writableFinished) disconnected.abort();
  });
  const version = req.headers['mcp-protocol-version'];
  const server = createRequestServer(deps, userId, disconnected.signal, { argumentErrorsAsResults: typeof version === 'string' && version >= ARGUMENT_ERRORS_AS_RESULTS_SINCE, admission });
  // A lone tools/call asking for progress, from a client that reads SSE, is answered with an SSE
  // stream: its progress notifications, then its result. A JSON answer could carry the result only.
  const streamed = !Array.isArray(message) && asksForProgress(screened.forward) && acceptsEventStream(req.headers.accept);
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !streamed });
  try {
    await server.connect(transport);
    const headers = new Headers({ accept: 'application/json, text/event-stream' });
    for (const name of ['content-type', 'mcp-protocol-version']) {
      const value = req.headers[name];
      if (typeof value === 'string') headers.set(name, value);
    }
    const response = await transport.handleRequest(new Request(`http://mcp-tools${req.originalUrl}`, { method: 'POST', headers }), { parsedBody: screened.forward });
    if (streamed) {
      res.status(response.status);
      response.headers.forEach((value, name) => res.setHeader(name, value));
      // The server is closed (finally) once the stream ended, or once the client went away (the
      // call in flight is then aborted through `disconnected`, and ends by itself).
      if (response.body) await pipeline(Readable.fromWeb(response.body as NodeReadableStream), res).catch(() => {});
      else res.end();
      return;
    }
    let body = Buffer.from(await response.arrayBuffer());
    const answered = response.status === 200 && (response.headers.get('content-type') ?? '').startsWith('application/json');
    if (screened.errors.length > 0 && (answered || response.status === 202)) {
      // A batch with members answered here: theirs join the transport's answers (none when it
      // served only notifications), in one array.
      const served = answered ? (JSON.parse(body.toString('utf8')) as unknown) : [];
      res.status(200).json([...(Array.isArray(served) ? served : [served]), ...screened.errors]);
      return;
    }
    // JSON-RPC 2.0 answers a batch with an array, a batch of one too; the SDK's transport sends a
    // lone answer bare. (A batch of notifications only has no answer: 202, no body.) A transport
    // refusal of the whole request (400, 406, 415) is one error object, never wrapped.
    const batchOfOne = Array.isArray(message) && answered && body[0] === 0x7b;
    if (batchOfOne) body = Buffer.concat([OPEN_BRACKET, body, CLOSE_BRACKET]);
    res.status(response.status);
    response.headers.forEach((value, name) => {
      if (!batchOfOne || name !== 'content-length') res.setHeader(name, value);
    });
    res.end(body);
  } finally {
    await server.close().catch((error: Error) => deps.logger.warn({ err: error.message }, 'mcp server close failed'));
  }
}

/**
 * Whether an Accept header admits application/json: its most specific range that covers it
 * (`application/json`, else `application/*`, else `*\/*`) has a q above 0. Parameters other than q
 * (`application/json; charset=utf-8`) do not matter; no header, or an empty one, admits anything.
 */
function acceptsJson(accept: string | undefined): boolean {
  if (accept === undefined || accept.trim() === '') return true;
  const SPECIFICITY: Record<string, number> = { '*/*': 1, 'application/*': 2, 'application/json': 3 };
  let best = 0;
  let acceptable = false;
  for (const range of accept.split(',')) {
    const [type = '', ...params] = range.split(';').map((part) => part.trim().toLowerCase());
    const specificity = SPECIFICITY[type] ?? 0;
    if (specificity === 0 || specificity < best) continue;
    const q = params.find((param) => param.startsWith('q='));
    const positive = q === undefined || Number(q.slice(2)) !== 0;
    acceptable = specificity > best ? positive : acceptable || positive;
    best = specificity;
  }
  return acceptable;
}

/** Whether an Accept header names text/event-stream with a q above 0 (the SDK client's does). */
function acceptsEventStream(accept: string | undefined): boolean {
  if (accept === undefined) return false;
  return accept.split(',').some((range) => {
    const [type = '', ...params] = range.split(';').map((part) => part.trim().toLowerCase());
    const q = params.find((param) => param.startsWith('q='));
    return type === 'text/event-stream' && (q === undefined || Number(q.slice(2)) !== 0);
  });
}

/** Whether `message` is a tools/call whose `_meta` carries a progress token (a string or a number). */
function asksForProgress(message: unknown): boolean {
  const request = message as { method?: unknown; params?: { _meta?: { progressToken?: unknown } } } | null;
  if (request?.method !== 'tools/call') return false;
  const token = request.params?._meta?.progressToken;
  return typeof token === 'string' || typeof token === 'number';
}

/** The JSON value of `text`, or null when it is not JSON. */
function parseWellFormed(text: string): { value: unknown } | null {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return null;
  }
}
