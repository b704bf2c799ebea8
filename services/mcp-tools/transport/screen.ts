import {
  CallToolRequestSchema,
  InitializeRequestSchema,
  JSONRPCMessageSchema,
  ListToolsRequestSchema,
  PingRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { ApiError, assertStorable } from '../../kit/index.js';
import { JSONRPC, jsonRpcError } from './jsonrpc.js';

/**
 * Sorts a parsed POST body into what the SDK's transport may see and what is answered here, in
 * JSON-RPC 2.0's terms. The transport alone would call every malformed message a parse error
 * (-32700, which JSON-RPC keeps for text that is not JSON), refuse a whole batch for one bad
 * member, accept an empty batch, and let the protocol layer answer bad `params` of the methods we
 * serve as an internal error (-32603). Here instead:
 * - a value that is not a JSON-RPC message is an invalid request (-32600), with its id when it has
 *   a usable one;
 * - an empty batch is one invalid request;
 * - a request to a method we serve whose params do not fit that method is invalid params (-32602);
 * - in a batch, each bad member gets its own error and the rest are still served;
 * - with `checkValues` (the body holds a value the platform refuses: a NUL or an unpaired surrogate
 *   in a string, a number out of range), a request holding one in its params is invalid params
 *   (-32602) naming the field, one holding it elsewhere (its id) an invalid request.
 */
const PARAMS_OF: Record<string, { safeParse(value: unknown): { success: boolean; error?: { issues: Array<{ path: PropertyKey[]; message: string }> } } }> = {
  initialize: InitializeRequestSchema,
  ping: PingRequestSchema,
  'tools/list': ListToolsRequestSchema,
  'tools/call': CallToolRequestSchema,
};

type ErrorAnswer = ReturnType<typeof jsonRpcError>;

/** Tool calls one batch may run; the others are refused, each with its own error. */
export const MAX_TOOL_CALLS_PER_BATCH = 1;

export interface Screened {
  /** What the transport gets: the served messages, an array when the body was one (null: none). */
  forward: unknown;
  /** Answers made here, in the body's order. */
  errors: ErrorAnswer[];
  /** The body was one message and it was not a JSON-RPC message: HTTP 400, as for a parse error. */
  invalid: boolean;
}

/** A message neither served nor answered (a notification or a response holding a refused value). */
const DROP = Symbol('drop');

export function screenMessages(body: unknown, options: { checkValues?: boolean } = {}): Screened {
  const screenOne = (message: unknown) => screenMessage(message, options.checkValues ?? false);
  if (!Array.isArray(body)) {
    const error = screenOne(body);
    if (error === DROP) return { forward: null, errors: [], invalid: false };
    if (!error) return { forward: body, errors: [], invalid: false };
    return { forward: null, errors: [error], invalid: error.error.code === JSONRPC.invalidRequest };
  }
  if (body.length === 0) return { forward: null, errors: [jsonRpcError(JSONRPC.invalidRequest, 'Invalid Request: an empty batch')], invalid: true };
  const forward: unknown[] = [];
  const errors: ErrorAnswer[] = [];
  // The transport answers by id: a second request with an id already served in this batch would
  // overwrite the first one's answer (one request run, its answer lost). The later one is refused.
  const served = new Set<unknown>();
  // The edge's rate limits count HTTP requests: a batch of tool calls would be one request running
  // many paid tools (searches, embeddings, sandboxes), so a batch runs at most one of them.
  let toolCalls = 0;
  for (const item of body) {
    const error = screenOne(item);
    if (error === DROP) continue;
    if (error) errors.push(error);
    else if (isRequest(item) && served.has(item.id)) errors.push(jsonRpcError(JSONRPC.invalidRequest, 'Invalid Request: the id is already used by another request of this batch', item.id));
    else if (isRequest(item) && item.method === 'tools/call' && ++toolCalls > MAX_TOOL_CALLS_PER_BATCH) {
      errors.push(jsonRpcError(JSONRPC.invalidRequest, 'Invalid Request: a batch holds at most one tools/call; send each tool call as a request of its own', item.id));
    } else {
      if (isRequest(item)) served.add(item.id);
      forward.push(item);
    }
  }
  return { forward: forward.length > 0 ? forward : null, errors, invalid: false };
}

function screenMessage(message: unknown, checkValues: boolean): ErrorAnswer | typeof DROP | null {
  if (!JSONRPCMessageSchema.safeParse(message).success) {
    return jsonRpcError(JSONRPC.invalidRequest, 'Invalid Request: not a JSON-RPC 2.0 request, notification or response', usableId(message));
  }
  const { id, method } = message as { id?: string | number; method?: unknown };
  if (checkValues) {
    const refused = refusedValue(message);
    if (refused) {
      // Only a request has an answer to carry the error; a notification or a response goes no further.
      if (id === undefined || typeof method !== 'string') return DROP;
      const inParams = refused.param === 'params' || refused.param.startsWith('params.') || refused.param.startsWith('params[');
      return inParams
        ? jsonRpcError(JSONRPC.invalidParams, `Invalid params for ${method}: ${refused.message}`, id, { param: refused.param })
        : jsonRpcError(JSONRPC.invalidRequest, `Invalid Request: ${refused.message}`, refused.param === 'id' ? null : usableId(message));
    }
  }
  // Notifications have no answer to carry an error; responses have no params.
  if (id === undefined || typeof method !== 'string') return null;
  const schema = PARAMS_OF[method];
  if (!schema) return null;
  const parsed = schema.safeParse(message);
  if (parsed.success) {
    // No tool runs as a task (tasks, 2025-11-25: a tool without `execution.taskSupport` is
    // "forbidden", and such a call is a -32601); the SDK would answer an internal error (-32603).
    const params = (message as { params?: { task?: unknown } }).params;
    if (method === 'tools/call' && params?.task !== undefined) return jsonRpcError(JSONRPC.methodNotFound, 'Method not found: no tool of this server runs as a task; call it without params.task', id, { param: 'params.task' });
    return null;
  }
  const issue = parsed.error!.issues[0]!;
  const where = issue.path.map(String).join('.');
  return jsonRpcError(JSONRPC.invalidParams, `Invalid params for ${method}${where ? `: '${where}'` : ''}: ${issue.message}`, id, where ? { param: where } : undefined);
}

/** A request (a method and an id), as opposed to a notification or a response. */
function isRequest(message: unknown): message is { id: string | number; method: string } {
  const m = message as { id?: unknown; method?: unknown };
  return m.id !== undefined && typeof m.method === 'string';
}

function usableId(message: unknown): string | number | null {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) return null;
  const id = (message as { id?: unknown }).id;
  return typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)) ? id : null;
}

/** The first value of `message` the platform refuses to store (the kit's rule for every request body), or null. */
function refusedValue(message: unknown): { message: string; param: string } | null {
  try {
    assertStorable(message);
    return null;
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    return { message: error.message, param: String(error.param ?? '') };
  }
}
