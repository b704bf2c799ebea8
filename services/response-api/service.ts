import { createServiceApp, serviceAppOptions, unbuiltDeps, type MigrationSet, type ServiceDefinition } from '../kit/index.js';
import { responsesConfigShape } from './config.js';
import { buildResponsesDeps } from './deps.js';
import { responsesMigrations } from './responses/migrations.js';
import { responsesRoutes } from './responses/routes.js';

/**
 * Response API: the OpenAI Responses API over the platform: a model runs the MCP tools of
 * mcp-tools over up to 8 steps, through llm-api's chat completions; responses are stored per
 * owner, streamed as Responses events, run in the background and cancelled from any process.
 */
export const responseApiMigrations: MigrationSet = { owner: 'response_api', migrations: responsesMigrations };

export const responseApiService: ServiceDefinition = {
  name: 'response-api',
  port: (config) => config.RESPONSE_API_PORT,
  config: responsesConfigShape,
  routeTable: () => responsesRoutes(() => unbuiltDeps('responses deps')),
  aliases: ['/llm'],
  migrations: [responseApiMigrations],
  createApp(ctx) {
    const deps = buildResponsesDeps(ctx);
    return createServiceApp({
      ...serviceAppOptions(ctx, 'response-api'),
      routeTable: responsesRoutes(() => deps.responses),
      // `/llm/v1/responses/...` and `/v1/responses/...` are the same endpoints (as on the other services).
      aliases: ['/llm'],
    });
  },
};
