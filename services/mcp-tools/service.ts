import { createServiceApp, serviceAppOptions, loadConfig, parseSize, unbuiltDeps, type MigrationSet, type ServiceDefinition } from '../kit/index.js';
import { adminMigrations } from './admin/migrations.js';
import { adminRoutes } from './admin/routes.js';
import { mcpConfigShape } from './config.js';
import { buildMcpDeps } from './deps.js';
import { fileSearchMigrations } from './file-search/migrations.js';
import type { McpEndpointDeps } from './transport/endpoint.js';
import { mcpRoutes } from './transport/routes.js';

/**
 * MCP Tools API: one stateless MCP server (POST /v1/mcp) with google_search, scrape,
 * file_search_index, file_search_query and python_exec, plus the administration of the tools.
 * Paths are served with and without the `/llm` prefix, like every `/v1` path of the platform.
 */
export const mcpToolsMigrations: MigrationSet = { owner: 'mcp_tools', migrations: [...adminMigrations, ...fileSearchMigrations] };

export const mcpToolsService: ServiceDefinition = {
  name: 'mcp-tools',
  port: (config) => config.MCP_TOOLS_PORT,
  config: mcpConfigShape,
  routeTable: () => [
    ...mcpRoutes(unbuiltDeps<McpEndpointDeps>('mcp deps', { bodyLimit: parseSize(loadConfig(mcpConfigShape, {}).MCP_BODY_LIMIT) })),
    ...adminRoutes(unbuiltDeps('mcp admin deps')),
  ],
  aliases: ['/llm'],
  migrations: [mcpToolsMigrations],
  async createApp(ctx) {
    const deps = await buildMcpDeps(ctx);
    return createServiceApp({
      ...serviceAppOptions(ctx, 'mcp-tools'),
      routeTable: [...mcpRoutes(deps.mcp), ...adminRoutes(deps.admin)],
      aliases: ['/llm'],
      metricsRegistry: deps.metricsRegistry,
    });
  },
};
