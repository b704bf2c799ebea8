import { routeGroup, type Route } from '../../kit/http/index.js';
import * as admin from './admin.js';
import { adminToolListSchema, adminToolSchema, patchToolBody, toolNameParams } from './schemas.js';

const tools = routeGroup({ tag: 'mcp-admin', access: 'admin' });

/** GET/PATCH /v1/admin/mcp/tools: the tools and their enabled state (administrators only). */
export function adminRoutes(deps: admin.AdminDeps): Route[] {
  return [
    tools.get('/v1/admin/mcp/tools', {
      summary: 'List the MCP tools with their enabled state',
      response: { schema: adminToolListSchema },
      handler: () => admin.listTools(deps),
    }),
    tools.get('/v1/admin/mcp/tools/:name', {
      summary: 'One MCP tool with its enabled state',
      request: { params: toolNameParams },
      response: { schema: adminToolSchema },
      handler: ({ params }) => admin.getTool(deps, params.name),
    }),
    tools.patch('/v1/admin/mcp/tools/:name', {
      summary: 'Enable or disable an MCP tool (emits mcp_tool.enabled / mcp_tool.disabled)',
      request: { params: toolNameParams, body: patchToolBody },
      response: { schema: adminToolSchema },
      handler: ({ params, body, principal }) => admin.setToolEnabled(deps, principal.userId, params.name, body),
    }),
  ];
}
