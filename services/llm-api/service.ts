import { createServiceApp, serviceAppOptions, unbuiltDeps, type Route, type ServiceDefinition } from '../kit/index.js';
import { llmApiConfigShape } from './config.js';
import { createLlmApiDeps, type LlmApiDeps } from './deps.js';
import { apiDocsResource } from './api-docs/index.js';
import { identityResource } from './identity/index.js';
import { projectsResource } from './projects/index.js';
import { conversationsResource } from './conversations/index.js';
import { providersResource } from './providers/index.js';
import { modelsResource } from './models/index.js';
import { chatResource, defaultChatRouteSettings, type ChatDeps } from './chat/index.js';
import type { LlmApiResource } from './resource.js';
import { webhooksResource } from './webhooks/index.js';
import { usageResource } from './usage/index.js';
import { consoleResource } from './console/index.js';
import { requestsResource } from './requests/index.js';
import { plannedResource } from './planned/index.js';

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
  usageResource,
  requestsResource,
  webhooksResource,
  apiDocsResource,
  consoleResource,
  plannedResource,
];

/** An llm-api made of the given resources (tests may mount a subset); `llmApiService` has them all. */
export function createLlmApiService(resources: LlmApiResource[]): ServiceDefinition {
  return {
    name: 'llm-api',
    port: (config) => config.LLM_API_PORT,
    config: llmApiConfigShape,
    // For the document: the chat table reads its settings while it is built; nothing else is read.
    routeTable: () =>
      llmApiRoutes(resources, unbuiltDeps<LlmApiDeps>('llm-api deps', { chat: unbuiltDeps<ChatDeps>('chat deps'), chatSettings: defaultChatRouteSettings })),
    aliases: ['/llm'],
    migrations: [
      { owner: 'llm_api', migrations: resources.flatMap((r) => r.migrations) },
      ...resources.flatMap((r) => (r.ownMigrations ? [r.ownMigrations] : [])),
    ],
    async createApp(ctx) {
      const deps = await createLlmApiDeps(ctx);
      for (const resource of resources) await resource.start?.(deps, ctx);
      return createServiceApp({
        ...serviceAppOptions(ctx, 'llm-api'),
        routeTable: llmApiRoutes(resources, deps),
        metricsRegistry: deps.metricsRegistry,
        // Every request served goes to the recent-requests log (when its table is part of this app).
        onRequestEnd: resources.includes(requestsResource) && deps.requestLogWriter ? deps.requestLogWriter.push : undefined,
        now: () => ctx.runtime.clock.now(),
        // `/llm/...` and `/...` are the same endpoints.
        aliases: ['/llm'],
      });
    },
  };
}

/** The route table of the given resources (the OpenAPI generator passes deps it never touches). */
export function llmApiRoutes(resources: LlmApiResource[], deps: LlmApiDeps): Route[] {
  return resources.flatMap((r) => r.routes(deps));
}

export const llmApiService = createLlmApiService(llmApiResources);

/** The token issuer's settings, for the platform's checks of settings that must agree across parts. */
export { loadIdentityConfig } from './identity/config.js';
