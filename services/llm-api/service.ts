import express from 'express';
import { createServiceApp, parseSize, type MigrationSet, type ServiceDefinition } from '../kit/index.js';
import { identityResource } from './identity/index.js';
import { projectsResource } from './projects/index.js';
import { conversationsResource } from './conversations/index.js';
import { providersResource } from './providers/index.js';
import { modelsResource } from './models/index.js';
import { chatResource } from './chat/index.js';
import type { LlmApiResource } from './resource.js';
import { webhooksResource } from './webhooks/index.js';

/**
 * LLM API: chat completions, conversations, projects, models, providers, identity and API keys.
 * Each resource lives in its own folder; add it to `llmApiResources` (order = mount order).
 */
export const llmApiResources: LlmApiResource[] = [
  identityResource,
  projectsResource,
  conversationsResource,
  providersResource,
  modelsResource,
  chatResource,
  webhooksResource,
];

/** An llm-api made of the given resources (tests may mount a subset); `llmApiService` has them all. */
export function createLlmApiService(resources: LlmApiResource[]): ServiceDefinition {
  return {
    name: 'llm-api',
    port: (config) => config.LLM_API_PORT,
    migrations: [
      { owner: 'llm_api', migrations: resources.flatMap((r) => r.migrations) },
      ...resources.flatMap((r) => (r.ownMigrations ? [r.ownMigrations] : [])),
    ],
    async createApp(ctx) {
      const router = express.Router();
      for (const resource of resources) await resource.mount(router, ctx);
      // `/llm/...` and `/...` are the same endpoints (SPEC.md section 1, rule 3): path rules cover both.
      const both = (re: RegExp) => [re, new RegExp(`^/llm${re.source.replace(/^\^/, '')}`, re.flags)];
      return createServiceApp({
        name: 'llm-api',
        logger: ctx.runtime.logger,
        gatewaySecret: ctx.gatewaySecret,
        users: ctx.runtime.users,
        readiness: ctx.runtime.readiness,
        bodyLimit: parseSize(ctx.runtime.config.JSON_BODY_LIMIT),
        bodyRules: resources.flatMap((r) => r.bodyRules ?? []).flatMap((rule) => both(rule.path).map((path) => ({ ...rule, path }))),
        publicPaths: resources.flatMap((r) => r.publicPaths ?? []).flatMap(both),
        routes: (root) => {
          root.use('/llm', router);
          root.use(router);
        },
      });
    },
  };
}

export const llmApiService = createLlmApiService(llmApiResources);
export const llmApiMigrations: MigrationSet = llmApiService.migrations[0]!;
