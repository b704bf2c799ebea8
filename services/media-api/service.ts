import { createServiceApp, parseSize, type MigrationSet, type ServiceDefinition } from '../kit/index.js';

/** Media API: Image upload, S3 storage, media IDs, presigned URLs, deduplication. */
export const mediaApiMigrations: MigrationSet = { owner: 'media_api', migrations: [] };

export const mediaApiService: ServiceDefinition = {
  name: 'media-api',
  port: (config) => config.MEDIA_API_PORT,
  migrations: [mediaApiMigrations],
  createApp: ({ runtime, gatewaySecret }) =>
    createServiceApp({
      name: 'media-api',
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
