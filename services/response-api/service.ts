import { createServiceApp, parseSize, type MigrationSet, type ServiceDefinition } from '../kit/index.js';

/** Response API: Multi-step tool orchestration (up to 8 steps) producing a final answer. */
export const responseApiMigrations: MigrationSet = { owner: 'response_api', migrations: [] };

export const responseApiService: ServiceDefinition = {
  name: 'response-api',
  port: (config) => config.RESPONSE_API_PORT,
  migrations: [responseApiMigrations],
  createApp: ({ runtime, gatewaySecret }) =>
    createServiceApp({
      name: 'response-api',
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
