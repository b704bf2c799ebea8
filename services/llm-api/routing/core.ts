import { createSecretBox, loadMasterKey, type SecretBox, type ServiceContext, type SharedServiceContext } from '../../kit/index.js';
import { createModelRegistry, type ModelRegistry } from '../models/registry.js';
import { createModelsStore, type ModelsStore } from '../models/store.js';
import type { ProviderRow } from '../models/types.js';
import { createProvidersStore, type ProvidersStore } from '../providers/store.js';
import type { SyncDeps } from '../providers/sync.js';
import { createUsageRecorder, type UsageRecorder } from '../usage/recorder.js';
import { EndpointHealth } from './health.js';
import { createProber } from './prober.js';
import { seededRandom, type Random } from './select.js';
import { createUpstream, type Upstream } from './upstream.js';

/**
 * What the providers, models and chat resources share inside one llm-api app: stores, the secret
 * box, the upstream connection pool, endpoint health, the model registry and the usage recorder.
 * Built once per ServiceContext (each resource's mount asks for it) and stopped with that app.
 */
export interface LlmCore {
  ctx: ServiceContext;
  providers: ProvidersStore;
  models: ModelsStore;
  box: SecretBox;
  upstream: Upstream;
  health: EndpointHealth;
  registry: ModelRegistry;
  usage: UsageRecorder;
  prober: ReturnType<typeof createProber>;
  random: Random;
  sync: SyncDeps;
  /** Reload the in-memory registry after a change committed in this process. */
  changed(): Promise<void>;
}

const cores = new WeakMap<ServiceContext, Promise<LlmCore>>();

export function llmCore(ctx: ServiceContext): Promise<LlmCore> {
  let core = cores.get(ctx);
  if (!core) {
    core = buildCore(ctx);
    cores.set(ctx, core);
  }
  return core;
}

/** The pieces a worker needs without an HTTP app (provider-sync). */
export function syncDepsFor(ctx: SharedServiceContext, upstream: Upstream): SyncDeps {
  const config = ctx.runtime.config;
  const box = createSecretBox(loadMasterKey(config));
  return {
    providers: createProvidersStore(ctx.runtime.db.knex),
    models: createModelsStore(ctx.runtime.db.knex),
    upstream,
    clock: ctx.runtime.clock,
    modelsTimeoutMs: config.LLM_MODELS_TIMEOUT_MS,
    apiKeyOf: (row: ProviderRow) => (row.api_key_sealed ? box.open(row.api_key_sealed, row.id) : null),
  };
}

export function upstreamFor(config: ServiceContext['runtime']['config']): Upstream {
  return createUpstream({
    connections: config.LLM_UPSTREAM_CONNECTIONS,
    connectTimeoutMs: config.LLM_UPSTREAM_CONNECT_TIMEOUT_MS,
    headersTimeoutMs: config.LLM_UPSTREAM_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.LLM_UPSTREAM_BODY_TIMEOUT_MS,
  });
}

async function buildCore(ctx: ServiceContext): Promise<LlmCore> {
  const { config, db, logger, clock } = ctx.runtime;
  const box = createSecretBox(loadMasterKey(config));
  const providers = createProvidersStore(db.knex);
  const models = createModelsStore(db.knex);
  const upstream = upstreamFor(config);
  const health = new EndpointHealth({ threshold: config.LLM_HEALTH_FAILURE_THRESHOLD, cooldownMs: config.LLM_HEALTH_COOLDOWN_MS, clock });
  const registry = createModelRegistry({ providers, models, box, logger, pollMs: config.LLM_CATALOG_POLL_MS });
  const usage = createUsageRecorder({ knex: db.knex, logger, flushMs: config.LLM_USAGE_FLUSH_MS, batchSize: config.LLM_USAGE_BATCH_SIZE });
  const prober = createProber({ registry, health, upstream, logger, intervalMs: config.LLM_HEALTH_PROBE_INTERVAL_MS, timeoutMs: config.LLM_UPSTREAM_CONNECT_TIMEOUT_MS });
  const random = config.LLM_ROUTING_SEED === undefined ? Math.random : seededRandom(config.LLM_ROUTING_SEED);
  const sync: SyncDeps = {
    providers,
    models,
    upstream,
    clock,
    modelsTimeoutMs: config.LLM_MODELS_TIMEOUT_MS,
    apiKeyOf: (row) => (row.api_key_sealed ? box.open(row.api_key_sealed, row.id) : null),
  };
  await registry.start();
  prober.start();
  const core: LlmCore = {
    ctx,
    providers,
    models,
    box,
    upstream,
    health,
    registry,
    usage,
    prober,
    random,
    sync,
    changed: () => registry.reload(),
  };
  // Flush usage and close pools when this app stops (after its server drained).
  ctx.onStop(async () => {
    registry.stop();
    prober.stop();
    await usage.stop();
    await upstream.close().catch(() => {});
  });
  return core;
}
