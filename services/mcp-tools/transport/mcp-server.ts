import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CancelledNotificationSchema, ErrorCode, ListToolsRequestSchema, McpError, type CallToolRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { jsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/types.js';
import type { ToolCatalog } from '../tools/catalog.js';
import type { ToolCaller, ToolSwitches } from '../tools/call-tool.js';

/**
 * The MCP protocol server for ONE request (stateless Streamable HTTP: no session survives the
 * request, so any mcp-tools process can answer any request). It is the SDK's low-level `Server`
 * rather than `McpServer`: the tool list is precomputed once per process, filtered by the enabled
 * switches, and argument errors name the field: as JSON-RPC invalid-params errors up to protocol
 * 2025-06-18, as error results the model can read from 2025-11-25 on.
 */
/**
 * tools/call is registered with a lenient schema: the SDK's protocol layer turns a schema mismatch
 * into an internal error (-32603), while `Server` checks the strict tools/call shape itself and
 * answers invalid params (-32602), which is what a malformed `params` is.
 */
const LenientCallToolRequest = z.object({ method: z.literal('tools/call'), params: z.unknown().optional() });

export const SERVER_INFO = { name: 'mcp-tools', version: '1.0.0' };

/**
 * The protocol revision from which a tool's argument errors are a tool result (`isError: true`)
 * the model can read and correct, not a JSON-RPC invalid-params error (SEP-1303, MCP 2025-11-25).
 * Revisions are dates, so they compare as strings; a request without `MCP-Protocol-Version` is
 * 2025-03-26 by the transport's rule.
 */
export const ARGUMENT_ERRORS_AS_RESULTS_SINCE = '2025-11-25';

export interface RequestOptions {
  argumentErrorsAsResults: boolean;
  /** The POST's admission number (`ToolCaller.admit`). */
  admission?: number;
}

export interface McpServerDeps {
  catalog: ToolCatalog;
  switches: ToolSwitches;
  callTool: ToolCaller;
  /**
   * Shared by the per-request servers: the SDK would otherwise build a new Ajv instance for every
   * server (about 1.5 ms, most of a request); this server never validates against client schemas.
   */
  jsonSchemaValidator: jsonSchemaValidator;
}

export function createRequestServer(deps: McpServerDeps, userId: string, requestSignal: AbortSignal, options: RequestOptions): Server {
  const server = new Server(SERVER_INFO, {
    capabilities: { tools: { listChanged: false } },
    jsonSchemaValidator: deps.jsonSchemaValidator,
    instructions:
      'Tools: google_search (web search), scrape (read a web page), file_search_index / file_search_query ' +
      '(index your own text and search it), python_exec (run Python in a sandbox without network).',
  });
  server.setRequestHandler(ListToolsRequestSchema, (request) => {
    // The list is one page and no cursor was ever handed out, so any cursor is not ours.
    if (request.params?.cursor !== undefined) throw new McpError(ErrorCode.InvalidParams, 'Invalid cursor: tools/list has a single page and issues no cursors', { param: 'cursor' });
    return {
      tools: deps.catalog.all.filter((tool) => deps.switches.isEnabled(tool.name)).map((tool) => deps.catalog.descriptor(tool.name)),
    };
  });
  server.setRequestHandler(LenientCallToolRequest, (request, extra) => {
    // `Server` has validated the strict shape by now.
    const { name, arguments: args } = (request as unknown as CallToolRequest).params;
    const progressToken = extra._meta?.progressToken;
    // Delivered only on an SSE answer (the endpoint streams one when the client asked for progress);
    // a notification that cannot be sent any more (the client went away) is simply not sent.
    const reportProgress =
      progressToken === undefined
        ? undefined
        : (progress: number, message: string) => void extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, message } }).catch(() => {});
    return deps.callTool(
      { userId, requestId: extra.requestId, signal: AbortSignal.any([requestSignal, extra.signal]), argumentErrorsAsResults: options.argumentErrorsAsResults, admission: options.admission, reportProgress },
      name,
      args,
    );
  });
  // A client cancels a call with a notification POSTed on its own, which reaches a server of its own:
  // the call it names is looked up among this user's calls in flight in the process, and passed to
  // the other replicas when it is not here.
  server.setNotificationHandler(CancelledNotificationSchema, (notification) => {
    const { requestId, reason } = notification.params;
    if (requestId !== undefined) deps.callTool.cancel(userId, requestId, reason);
  });
  return server;
}
