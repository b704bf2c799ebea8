import { createServiceApp, parseSize, type MigrationSet, type ServiceDefinition } from '../kit/index.js';

/** MCP Tools API: MCP server: web search, scrape, file search, sandboxed Python. */
export const mcpToolsMigrations: MigrationSet = { owner: 'mcp_tools', migrations: [] };

export const mcpToolsService: ServiceDefinition = {
  name: 'mcp-tools',
  port: (config) => config.MCP_TOOLS_PORT,
  migrations: [mcpToolsMigrations],
  createApp: ({ runtime, gatewaySecret }) =>
    createServiceApp({
      name: 'mcp-tools',
      logger: runtime.logger,
      gatewaySecret,
      users: runtime.users,
      readiness: runtime.readiness,
      bodyLimit: parseSize(runtime.config.JSON_BODY_LIMIT),
      routes: () => {
        // Resources are mounted here by the issues that build them.
      },
    }),
};
