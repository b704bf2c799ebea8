import type { Knex } from 'knex';
import type { Clock, SecretBox } from '../../services/kit/index.js';
import type { ModelListClient } from './model-list.js';
import { createModelsStore } from './models-store.js';
import { createProvidersStore, type ProviderRow } from './providers-store.js';
import type { SyncDeps } from './sync.js';

/**
 * The model catalog, shared by llm-api (administration, the in-memory registry the chat path reads)
 * and the provider-sync worker: provider and model tables, their stores, model synchronisation and
 * the upstream model-list client. Import this file only; the others are its internals.
 */
export { catalogConfigShape, loadCatalogConfig, type CatalogConfig } from './config.js';
export { providerSyncGeneration, providersTables, syncRunsTables } from './providers-migrations.js';
export { createSyncRunsStore, type SyncRunCounts, type SyncRunRow, type SyncRunStatus, type SyncRunsStore } from './sync-runs-store.js';
export { modelsTables } from './models-migrations.js';
export { createProvidersStore, endpointsOf, type EndpointConfig, type ProviderRow, type ProvidersStore } from './providers-store.js';
export {
  CATALOG_FLAGS,
  PROVIDER_MODEL_FLAGS,
  capabilitiesOf,
  createModelsStore,
  type CatalogRow,
  type ModelsStore,
  type PricingLine,
  type ProviderModelRow,
} from './models-store.js';
export { diff } from './diff.js';
export {
  authHeaders,
  bearer,
  createModelListClient,
  fetchUpstreamModels,
  getProviderJson,
  joinUrl,
  MAX_MODEL_LIST_PAGES,
  MAX_UPSTREAM_MODELS,
  readCapped,
  SyncError,
  type ModelListClient,
} from './model-list.js';
export { http2Only, providerConnectOptions, ProviderProtocolError, STREAMS_PER_HTTP2_CONNECTION, type Connector, type ProviderHttpVersion } from './provider-connections.js';
export { PROVIDER_SYNC_QUEUE, syncProvider, type SyncDeps, type SyncResult } from './sync.js';
export type { SkippedModel } from './upstream-entry.js';

/** What synchronisation needs, from the database, the secret box and a model-list client. */
export function catalogSyncDeps(parts: { knex: Knex; box: SecretBox; clock: Clock; upstream: ModelListClient; modelsTimeoutMs: number }): SyncDeps {
  return {
    providers: createProvidersStore(parts.knex),
    models: createModelsStore(parts.knex),
    upstream: parts.upstream,
    clock: parts.clock,
    modelsTimeoutMs: parts.modelsTimeoutMs,
    apiKeyOf: (row: ProviderRow) => (row.api_key_sealed ? parts.box.open(row.api_key_sealed, row.id) : null),
  };
}
