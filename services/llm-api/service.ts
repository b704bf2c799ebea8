import { createServiceApp, parseSize, type MigrationSet, type ServiceDefinition } from '../kit/index.js';

/** LLM API: Chat completions, conversations, projects, models, providers, identity and API keys. */
export const llmApiMigrations: MigrationSet = { owner: 'llm_api', migrations: [] };

export const llmApiService: ServiceDefinition = {
  name: 'llm-api',
  port: (config) => config.LLM_API_PORT,
  migrations: [llmApiMigrations],
  createApp: ({ runtime, gatewaySecret }) =>
    createServiceApp({
      name: 'llm-api',
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
