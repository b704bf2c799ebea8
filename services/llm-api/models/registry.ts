import {
  endpointsOf,
  type CatalogRow,
  type EndpointConfig,
  type ModelsStore,
  type ProviderModelRow,
  type ProviderRow,
  type ProvidersStore,
} from '../../../domains/catalog/index.js';
import { notFound, runEvery, type Logger, type Periodic, type SecretBox } from '../../kit/index.js';

/**
 * OpenAI's 404 for a model id that resolves to nothing. `param` names the request field that gave
 * it (`model` in a chat body or the model path of `GET /v1/models/{model}`: `err.param` in the SDKs).
 */
export const modelNotFound = (id: string, param: string | null = null) =>
  notFound(`The model '${id}' does not exist or you do not have access to it.`, 'model_not_found', param ?? undefined);

/**
 * The in-memory view of providers and models that the hot path reads: model resolution and the
 * model list never query the database. Admin changes in this process call `reload()` before they
 * answer; changes made elsewhere (another replica, the provider-sync worker) bump
 * `llm_catalog_state.version`, which a timer polls every LLM_CATALOG_POLL_MS.
 */
export interface ProviderRuntime {
  row: ProviderRow;
  /** Decrypted once per reload, kept only in memory. */
  apiKey: string | null;
  /**
   * A key is stored but does not decrypt (MASTER_KEY rotated, value altered): the provider is never
   * called, as calling it without its key would send requests unauthenticated (or to a keyless
   * proxy that bills someone else).
   */
  keyUnavailable?: boolean;
  /** The configured endpoints, or the base URL as the single endpoint. */
  endpoints: EndpointConfig[];
}

export interface Candidate {
  pm: ProviderModelRow;
  provider: ProviderRuntime;
}

export interface ResolvedModel {
  publicId: string;
  catalog: CatalogRow;
  /** Best first: model_order_number, category_order_number, provider registration order. */
  candidates: Candidate[];
}

/**
 * The context window a model's requests are fitted to: its best provider's token limit, else its
 * catalog entry's; null when neither says. A 0 (stored by an older synchronisation that took a
 * provider's "0 = unknown" at its word) says nothing: fitted to it, every request would lose its
 * conversation's history.
 */
export function contextLengthOf(model: ResolvedModel): number | null {
  return model.candidates[0]!.pm.token_limits.context_length || model.catalog.context_length || null;
}

interface Snapshot {
  version: number;
  providers: Map<string, ProviderRuntime>;
  models: Map<string, ResolvedModel>;
  /** Best candidate per model, in list order (GET /v1/models). */
  /** Each model once, best first by its best candidate. */
  listing: ResolvedModel[];
}

export function createModelRegistry(deps: {
  providers: ProvidersStore;
  models: ModelsStore;
  box: SecretBox;
  logger: Logger;
  pollMs: number;
}) {
  let snapshot: Snapshot = { version: -1, providers: new Map(), models: new Map(), listing: [] };
  let polling: Periodic | undefined;
  let stopped = false;
  let loading: Promise<void> | undefined;

  async function load(): Promise<void> {
    const version = await deps.models.version();
    const [providerRows, catalogs, pms] = await Promise.all([
      deps.providers.list(),
      deps.models.allCatalogs(),
      deps.models.allProviderModels(),
    ]);
    const providers = new Map<string, ProviderRuntime>();
    for (const row of providerRows) {
      let apiKey: string | null = null;
      let keyUnavailable = false;
      if (row.api_key_sealed) {
        try {
          apiKey = deps.box.open(row.api_key_sealed, row.id);
        } catch {
          keyUnavailable = true;
          deps.logger.error(
            { provider_id: row.id, provider: row.name },
            'provider api key cannot be decrypted (MASTER_KEY changed, or the stored value altered): its models answer 502 provider_key_unavailable until the key is set again',
          );
        }
      }
      providers.set(row.id, { row, apiKey, keyUnavailable, endpoints: endpointsOf(row) });
    }
    const catalogById = new Map(catalogs.map((c) => [c.id, c]));
    const models = new Map<string, ResolvedModel>();
    const sorted = [...pms].sort(
      (a, b) =>
        a.model_order_number - b.model_order_number ||
        a.category_order_number - b.category_order_number ||
        (providers.get(a.provider_id)?.row.seq ?? 0) - (providers.get(b.provider_id)?.row.seq ?? 0),
    );
    for (const pm of sorted) {
      const provider = providers.get(pm.provider_id);
      const catalog = catalogById.get(pm.model_catalog_id);
      if (!provider || !catalog || !pm.active || !provider.row.active || !catalog.active) continue;
      let entry = models.get(pm.model_public_id);
      if (!entry) models.set(pm.model_public_id, (entry = { publicId: pm.model_public_id, catalog, candidates: [] }));
      entry.candidates.push({ pm, provider });
    }
    const best = (m: ResolvedModel) => m.candidates[0]!.pm;
    const listing = [...models.values()].sort(
      (a, b) =>
        best(a).category_order_number - best(b).category_order_number ||
        best(a).model_order_number - best(b).model_order_number ||
        a.publicId.localeCompare(b.publicId),
    );
    snapshot = { version, providers, models, listing };
  }

  function reload(): Promise<void> {
    // Concurrent callers share one load; a caller arriving during a load waits for a fresh one after it.
    const next = (loading ?? Promise.resolve()).catch(() => {}).then(load);
    loading = next.finally(() => {
      if (loading === tracked) loading = undefined;
    });
    const tracked = loading;
    return next;
  }

  async function poll(): Promise<void> {
    const version = await deps.models.version();
    if (version !== snapshot.version) await reload();
  }

  return {
    /** Loads the catalog, then polls its version every `pollMs` after the last poll ended (0: never). */
    async start() {
      stopped = false;
      await reload();
      if (deps.pollMs > 0 && !stopped && !polling) {
        polling = runEvery(deps.pollMs, poll, (error) => deps.logger.warn({ err: error.message }, 'model registry poll failed; serving the last snapshot'));
      }
    },
    reload,
    /** Cancels the next poll and waits for one in progress. */
    async stop(): Promise<void> {
      stopped = true;
      const stopping = polling?.stop();
      polling = undefined;
      await stopping;
    },
    resolve: (publicId: string): ResolvedModel | undefined => snapshot.models.get(publicId),
    listing: (): ResolvedModel[] => snapshot.listing,
    provider: (id: string): ProviderRuntime | undefined => snapshot.providers.get(id),
    providers: (): ProviderRuntime[] => [...snapshot.providers.values()],
  };
}

export type ModelRegistry = ReturnType<typeof createModelRegistry>;
