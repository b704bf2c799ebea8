import express from 'express';
import { createServiceApp, parseSize, type ServiceDefinition } from '../../../services/kit/index.js';
import { identityResource } from '../../../services/llm-api/identity/index.js';

/**
 * llm-api with only the identity resource mounted, wired exactly as services/llm-api/service.ts
 * wires every resource (both path prefixes, public paths, body rules). Service-level identity
 * tests use it so they do not depend on other resources being complete; the end-to-end tests
 * go through the full platform.
 */
export const identityOnlyService: ServiceDefinition = {
  name: 'llm-api',
  port: (config) => config.LLM_API_PORT,
  migrations: [{ owner: 'llm_api', migrations: identityResource.migrations }],
  async createApp(ctx) {
    const router = express.Router();
    await identityResource.mount(router, ctx);
    const both = (re: RegExp) => [re, new RegExp(`^/llm${re.source.replace(/^\^/, '')}`, re.flags)];
    return createServiceApp({
      name: 'llm-api',
      logger: ctx.runtime.logger,
      gatewaySecret: ctx.gatewaySecret,
      users: ctx.runtime.users,
      readiness: ctx.runtime.readiness,
      bodyLimit: parseSize(ctx.runtime.config.JSON_BODY_LIMIT),
      bodyRules: (identityResource.bodyRules ?? []).flatMap((rule) => both(rule.path).map((path) => ({ ...rule, path }))),
      publicPaths: (identityResource.publicPaths ?? []).flatMap(both),
      routes: (root) => {
        root.use('/llm', router);
        root.use(router);
      },
    });
  },
  stop: () => identityResource.stop!(),
};
