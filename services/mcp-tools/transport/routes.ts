import { route, type Route } from '../../kit/http/index.js';
import { JSONRPC, sendJsonRpcError } from './jsonrpc.js';
import { handleMcpPost, type McpEndpointDeps } from './endpoint.js';

/**
 * The MCP endpoint. Only POST exists: the server is stateless, so there is no standalone SSE
 * stream to GET and no session to DELETE; both answer 405 as a JSON-RPC error (as the SDK's
 * stateless examples do). A POST is answered with JSON, except a lone tools/call asking for
 * progress (a `progressToken`) from a client that accepts `text/event-stream`: that one is
 * answered with an SSE stream of its progress notifications, then its result, on the POST itself.
 * Errors on this path are JSON-RPC error objects.
 */
export function mcpRoutes(deps: McpEndpointDeps): Route[] {
  const notAllowed = route({
    method: 'get',
    path: '/v1/mcp',
    summary: 'Not available: the MCP server is stateless (no standalone SSE stream); answers 405',
    access: 'user',
    handler: ({ res }) => sendJsonRpcError(res, 405, JSONRPC.serverError, 'Method not allowed: this MCP server is stateless; use POST', { allow: 'POST' }),
  });
  return [
    route({
      method: 'post',
      path: '/v1/mcp',
      summary: 'Model Context Protocol over Streamable HTTP (JSON-RPC 2.0: initialize, tools/list, tools/call)',
      access: 'user',
      body: 'stream',
      bodyLimit: deps.bodyLimit,
      request: { contentType: 'application/json' },
      response: {
        contentType: 'application/json',
        description:
          'A JSON-RPC 2.0 response (or batch of responses); a lone tools/call with a `progressToken` in its `_meta`, from a client accepting `text/event-stream`, ' +
          'is answered as a `text/event-stream`: its `notifications/progress` messages, then its JSON-RPC response',
      },
      handler: ({ req, res, principal }) => handleMcpPost(deps, principal.userId, req, res),
    }),
    notAllowed,
    { ...notAllowed, method: 'delete', summary: 'Not available: the MCP server keeps no sessions; answers 405' },
  ];
}
