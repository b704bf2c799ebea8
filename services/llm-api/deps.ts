import { catalogSyncDeps, createModelsStore, createProvidersStore, createSyncRunsStore } from '../../domains/catalog/index.js';
import { Registry } from 'prom-client';
import { createDeliveriesStore, createWebhooksStore, registerWebhookMetrics } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey, parseSize, type BatchWriter, type ServedRequest, type ServiceContext } from '../kit/index.js';
import { loadLlmApiConfig, type LlmApiConfig } from './config.js';
import { buildChatDeps, createResearchPort, createStoreHooks, loadChatLimits, type ChatDeps, type ChatRouteSettings } from './chat/index.js';
import { createMediaPort } from './chat/media-refs.js';
import { detachProjectConversations, type ConversationDeps } from './conversations/index.js';
import { createIdentity, type IdentityDeps } from './identity/index.js';
import type { ModelDeps } from './models/index.js';
import { createModelRegistry } from './models/registry.js';
import { findProject, type ProjectDeps } from './projects/index.js';
import type { ProviderDeps } from './providers/index.js';
import { createRequestLogWriter, type RequestLogDeps } from './requests/index.js';
import { EndpointHealth } from './routing/health.js';
import { createProber } from './routing/prober.js';
import { seededRandom } from './routing/select.js';
import { createUpstream, type Upstream } from './routing/upstream.js';
import { createUsageRecorder } from './usage/recorder.js';
import { createUsageMetrics } from './usage/metrics.js';
import { registerProviderConnectionMetrics } from './routing/connection-metrics.js';
import type { WebhooksDeps } from './webhooks/index.js';
import { admitRequest, createSpendLimitsCache, modelAccess, spendLimitsPort, type SpendDeps, type UsageReportDeps } from './usage/index.js';

/**
 * llm-api's composition root: every dependency of the app is built here, once per `createApp`,
 * from validated config and the kit's runtime, then handed to each resource's `routes(deps)`.
 * Read top to bottom, it is the whole wiring of the service. Each resource takes only the part it
 * names in its own type; nothing here is a module-level singleton, so tests build as many apps as
 * they like. What a part starts (timers, pools) stops with the app (`ctx.onStop`).
 */
export interface LlmApiDeps {
  identity: IdentityDeps;
  conversations: ConversationDeps;
  projects: ProjectDeps;
  providers: ProviderDeps;
  models: ModelDeps;
  webhooks: WebhooksDeps;
  /** Starts what reading the catalog needs (registry load, endpoint probes); once per app. */
  catalog: { start(): Promise<void> };
  chat: ChatDeps;
  /** The chat route's body limit and keep-alive interval, from validated config. */
  chatSettings: ChatRouteSettings;
  /** Usage and cost reports read the daily rollup the usage writer keeps current. */
  usageReports: UsageReportDeps;
  /** The recent-requests log: reads (admin route) and the batch writer the app feeds (null: REQUEST_LOG_MAX_ROWS=0). */
  requestLog: RequestLogDeps;
  requestLogWriter: BatchWriter<ServedRequest> | null;
  /** llm-api's own series, served on /metrics beside the HTTP ones. */
  metricsRegistry: Registry;
  /** Budgets and model allow-lists of keys and users (set through identity's routes, enforced by chat). */
  spend: SpendDeps;
}

export async function createLlmApiDeps(ctx: ServiceContext): Promise<LlmApiDeps> {
  const { config: platform, db, bus, clock, logger } = ctx.runtime;
  const config = loadLlmApiConfig(platform.env);
  const knex = db.knex;

  // Budgets are written by identity (with a key or a user, in one transaction) and read by chat's
  // admission; the allow-lists also limit what the public model list and lookup show.
  const limitsCache = createSpendLimitsCache({ ttlMs: config.LLM_SPEND_LIMITS_CACHE_MS, clock });
  const chatLimits = loadChatLimits(platform.env);
  const spend: SpendDeps = {
    knex,
    clock,
    logger,
    guestAllowedModels: config.GUEST_ALLOWED_MODELS,
    limitsCache,
    maxRequestMs: chatLimits.maxDurationMs,
  };
  // One box seals what the platform keeps secret at rest: identity's signing keys, providers' API keys.
  const box = createSecretBox(loadMasterKey(platform));
  const identity: IdentityDeps = {
    identity: createIdentity({ runtime: ctx.runtime, settings: { ...platform, ...config }, box, spend: spendLimitsPort({ clock, limitsCache }) }),
    guestEmailDomain: config.GUEST_EMAIL_DOMAIN,
    guestLoginEnabled: config.GUEST_LOGIN_ENABLED,
    bootstrapAdminApiKey: config.BOOTSTRAP_ADMIN_API_KEY,
    sweepIntervalMs: config.API_KEY_SWEEP_INTERVAL_MS,
  };

  // Conversations and projects see each other through two small ports, so neither imports the other.
  const conversations: ConversationDeps = {
    knex,
    clock,
    projects: { ownsForShare: async (trx, projectId, userId) => (await findProject(trx, projectId, userId, 'share')) !== undefined },
  };

  const projects: ProjectDeps = {
    knex,
    clock,
    detachConversations: (trx, projectId) => detachProjectConversations(trx, { projectId, clock }),
  };

  // The catalog: stores, the sealed provider keys, and the in-memory registry the hot path reads.
  const providerStore = createProvidersStore(knex);
  const modelStore = createModelsStore(knex);
  const registry = createModelRegistry({ providers: providerStore, models: modelStore, box, logger, pollMs: config.LLM_CATALOG_POLL_MS });

  // Calls to providers: one guarded connection pool, endpoint health, and the prober that heals it.
  // One guard for every provider destination: the pool's connections and the URLs an admin stores.
  const providerGuard = providerGuardFor(config);
  const upstream = upstreamFor(config, providerGuard);
  const health = new EndpointHealth({ threshold: config.LLM_HEALTH_FAILURE_THRESHOLD, cooldownMs: config.LLM_HEALTH_COOLDOWN_MS, clock });
  const prober = createProber({ registry, health, upstream, logger, intervalMs: config.LLM_HEALTH_PROBE_INTERVAL_MS, timeoutMs: config.LLM_UPSTREAM_CONNECT_TIMEOUT_MS });
  const random = config.LLM_ROUTING_SEED === undefined ? Math.random : seededRandom(config.LLM_ROUTING_SEED);
  const metricsRegistry = new Registry();
  const usageMetrics = createUsageMetrics(metricsRegistry, health);
  registerProviderConnectionMetrics(metricsRegistry, upstream.agent);
  const usage = createUsageRecorder({ knex, logger, flushMs: config.LLM_USAGE_FLUSH_MS, batchSize: config.LLM_USAGE_BATCH_SIZE });
  const sync = catalogSyncDeps({ knex, box, clock, upstream, modelsTimeoutMs: config.LLM_MODELS_TIMEOUT_MS });

  const providers: ProviderDeps = { knex, clock, box, providers: providerStore, models: modelStore, syncRuns: createSyncRunsStore(knex), sync, health, registry, bus, guard: providerGuard };
  const models: ModelDeps = { knex, clock, providers: providerStore, models: modelStore, registry, modelAccess: (principal) => modelAccess(spend, principal) };
  // Media in chat: jan_ references resolved and inline images stored, by calls to media-api.
  const media = createMediaPort({ baseUrl: () => ctx.urls.mediaApi, gatewayToken: ctx.gatewaySecret, timeoutMs: platform.INTERNAL_HTTP_TIMEOUT_MS });
  ctx.onStop(() => media.close());
  // Deep research: response-api's tool loop, asked service to service (llm-api never imports its code).
  const research = createResearchPort({ baseUrl: () => ctx.urls.responseApi, gatewayToken: ctx.gatewaySecret });
  ctx.onStop(() => research.close());
  // Chat: narrow deps over the same registry, pool, health and usage recorder.
  const chat = buildChatDeps({
    registry,
    upstream,
    health,
    random,
    recorder: {
      record(entry) {
        usage.record(entry);
        usageMetrics.observe(entry);
      },
    },
    logger,
    clock,
    limits: chatLimits,
    conversations: createStoreHooks(ctx, { conversations, storeMessage: (principal, message) => media.storeInlineImages(principal, message) }),
    messageSteps: [media.resolveStep],
    admission: { admit: (principal, model, served) => admitRequest(spend, principal, model, served) },
    research: { port: research, clock },
    logPrompts: config.LOG_PROMPTS,
  });
  const chatSettings: ChatRouteSettings = { bodyLimit: parseSize(config.LLM_CHAT_BODY_LIMIT), keepAliveMs: config.LLM_SSE_KEEPALIVE_MS };
  // Loading the registry and probing endpoints starts with the first resource that reads the catalog
  // (an app made of other resources, as some tests build, has no catalog tables).
  let catalogStarted: Promise<void> | undefined;
  const catalog = {
    start: () =>
      (catalogStarted ??= registry.start().then(() => {
        prober.start();
      })),
  };

  // Webhook subscriptions (deliveries are the webhook-delivery worker's): receiver URLs pass the egress guard.
  const webhooks: WebhooksDeps = {
    webhooks: createWebhooksStore(knex),
    deliveries: createDeliveriesStore(knex),
    box,
    guard: createEgressGuard({ allowHosts: platform.EGRESS_ALLOW_HOSTS }),
    bus,
    clock,
    logger: logger.child({ resource: 'webhooks' }),
    secretGraceSeconds: config.WEBHOOK_SECRET_GRACE_SECONDS,
    checkTimeoutMs: config.WEBHOOK_TIMEOUT_MS,
  };

  registerWebhookMetrics(metricsRegistry, { deliveries: webhooks.deliveries, clock });

  const requestLogWriter =
    config.REQUEST_LOG_MAX_ROWS > 0
      ? createRequestLogWriter({ knex, clock, logger, retentionHours: config.REQUEST_LOG_RETENTION_HOURS, maxRows: config.REQUEST_LOG_MAX_ROWS, flushMs: config.REQUEST_LOG_FLUSH_MS })
      : null;

  // Flush usage and the request log, and close pools, when this app stops (after its server drained).
  ctx.onStop(async () => {
    await registry.stop();
    await prober.stop();
    await usage.stop();
    await requestLogWriter?.stop();
    await upstream.close().catch(() => {});
  });

  return { identity, conversations, projects, providers, models, webhooks, catalog, chat, chatSettings, usageReports: { knex }, metricsRegistry, spend, requestLog: { knex }, requestLogWriter };
}

/** Where provider calls may go: PROVIDER_URL_ALLOW when set (only there), else the egress guard's public rules. */
export const providerGuardFor = (config: LlmApiConfig) => createEgressGuard({ allowHosts: config.PROVIDER_URL_ALLOW, exclusive: true });

/** The connection pool for provider calls, guarded by PROVIDER_URL_ALLOW. */
export function upstreamFor(config: LlmApiConfig, guard = providerGuardFor(config)): Upstream {
  return createUpstream({
    connections: config.LLM_UPSTREAM_CONNECTIONS,
    connectTimeoutMs: config.LLM_UPSTREAM_CONNECT_TIMEOUT_MS,
    headersTimeoutMs: config.LLM_UPSTREAM_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.LLM_UPSTREAM_BODY_TIMEOUT_MS,
    httpVersion: config.LLM_UPSTREAM_HTTP_VERSION,
    guard,
    maxBodyBytes: parseSize(config.LLM_MAX_RESPONSE_BYTES),
  });
}
