import type { Knex } from 'knex';
import { newId, recordEvent, unixSeconds, type Clock } from '../../services/kit/index.js';
import { diff } from './diff.js';
import { fetchUpstreamModels, SyncError, type ModelListClient, type UpstreamModel } from './model-list.js';
import { capabilitiesOf, type CatalogRow, type ModelsStore, type ProviderModelRow } from './models-store.js';
import type { ProviderRow, ProvidersStore } from './providers-store.js';
import type { SkippedModel } from './upstream-entry.js';

/**
 * Model synchronisation: reads the provider's OpenAI-compatible `GET {base_url}/models`, adds new
 * models (catalog entry + provider model, `model.added`), updates changed ones (`model.updated`),
 * deactivates vanished ones and reactivates them if they come back. Fields an admin set by hand
 * (`manual_fields`) are never overwritten. Used by registration, the admin sync endpoint and the
 * provider-sync worker.
 *
 * An entry the catalog cannot hold is skipped (upstream-entry.ts), named in the result and in the
 * provider's `last_sync_error`; the others are synchronised. A catalog entry several providers offer
 * carries the metadata (name, description, context length, architecture, parameters) of one of
 * them: the first active provider in registration order whose list has it (`catalogSources`), so
 * the others' syncs leave it alone and a steady state emits no events.
 *
 * Two syncs of one provider may run side by side (two provider-sync workers, the admin's sync beside
 * the scheduled one) and the one that fetched first may commit last. Each sync draws a generation
 * before it fetches, and commits only if no later one committed first (`claimSyncCommit`, one
 * statement that also locks the provider for the commit): an older list never overwrites a newer
 * one. A superseded sync changes nothing and says so (`superseded`); its failure to fetch is not
 * recorded over a later success either. Generations come from a sequence, so a clock set back
 * freezes nothing.
 */

export interface SyncDeps {
  providers: ProvidersStore;
  models: ModelsStore;
  /** Reads a provider's `GET /models` (llm-api passes its upstream pool; a worker its own client). */
  upstream: ModelListClient;
  clock: Clock;
  modelsTimeoutMs: number;
  /** Decrypts the provider's API key. */
  apiKeyOf(row: ProviderRow): string | null;
}

export interface SyncResult {
  provider_id: string;
  added: number;
  /** Models whose catalog entry or provider model changed. */
  updated: number;
  deactivated: number;
  /** Entries of the provider's list that were not synchronised, each with its reason. */
  skipped: SkippedModel[];
  /** The provider's models as committed (after this sync, or the later one that superseded it). */
  models: ProviderModelRow[];
  /**
   * Set when a sync that fetched the provider's list later committed first: this one's older list
   * was dropped and nothing changed (the counts are 0).
   */
  superseded?: true;
}

/** How many skipped models `last_sync_error` names before "and N more". */
const SKIPPED_NAMED = 5;

/** The provider's `last_sync_error` after a sync that skipped entries (null: none skipped). */
function skippedSummary(skipped: SkippedModel[]): string | null {
  if (!skipped.length) return null;
  const named = skipped.slice(0, SKIPPED_NAMED).map((s) => s.error).join('; ');
  const more = skipped.length > SKIPPED_NAMED ? `; and ${skipped.length - SKIPPED_NAMED} more` : '';
  return `${skipped.length} model entr${skipped.length === 1 ? 'y' : 'ies'} skipped: ${named}${more}`;
}

/** Queue the provider-sync worker consumes for on-demand runs (`{provider_id?}`). */
export const PROVIDER_SYNC_QUEUE = 'llm.provider-sync';

function derive(m: UpstreamModel, row: ProviderRow, nowSec: number) {
  const params = Array.isArray(m.supported_parameters) ? m.supported_parameters.filter((p) => typeof p === 'string') : null;
  const modalities = m.architecture?.input_modalities;
  const input = Array.isArray(modalities) ? modalities : [];
  const contextLength = m.context_length ?? m.max_model_len ?? m.top_provider?.context_length ?? null;
  const catalog: Partial<CatalogRow> = {
    model_display_name: m.name ?? m.id,
    description: m.description ?? null,
    context_length: typeof contextLength === 'number' ? contextLength : null,
    architecture: m.architecture ?? null,
    supported_parameters: params ? { names: params, default: {} } : null,
    supports_reasoning: params ? params.includes('reasoning') || params.includes('include_reasoning') : false,
    supports_tools: params ? params.includes('tools') : false,
    supports_images: input.includes('image'),
  };
  const tokenLimits: ProviderModelRow['token_limits'] = {};
  if (typeof contextLength === 'number') tokenLimits.context_length = contextLength;
  if (typeof m.top_provider?.max_completion_tokens === 'number') tokenLimits.max_completion_tokens = m.top_provider.max_completion_tokens;
  const pm: Partial<ProviderModelRow> = {
    model_display_name: m.name ?? m.id,
    owned_by: m.owned_by ?? row.vendor,
    token_limits: tokenLimits,
    supports_reasoning: catalog.supports_reasoning,
    supports_images: catalog.supports_images,
  };
  return { catalog, pm, created: typeof m.created === 'number' ? m.created : nowSec };
}

const iso = (clock: Clock) => new Date(clock.now()).toISOString();

export async function syncProvider(deps: SyncDeps, providerId: string, trxIn?: Knex.Transaction): Promise<SyncResult> {
  const row = await deps.providers.byId(providerId);
  if (!row) throw new SyncError(`provider ${providerId} does not exist`);
  // Drawn before the fetch: a sync that fetches later has a later generation.
  const generation = await deps.providers.nextSyncGeneration();
  let upstream: { models: UpstreamModel[]; skipped: SkippedModel[] };
  try {
    upstream = await fetchUpstreamModels(deps, row);
  } catch (error) {
    await deps.providers.recordSyncError(trxIn ?? deps.providers.knex, providerId, generation, (error as Error).message);
    throw error;
  }
  const run = async (trx: Knex.Transaction) => applySync(deps, trx, providerId, generation, upstream.models, upstream.skipped);
  return trxIn ? run(trxIn) : deps.models.knex.transaction(run);
}

/**
 * Inserts a new catalog entry, or answers undefined when another transaction committed an entry
 * with the same public id first (two providers offering the same new model, registered or synced
 * at once): the insert waits for that transaction and then hits the unique public id. The insert
 * runs in a savepoint so the sync's transaction stays usable, and the caller reads the other entry.
 */
async function insertCatalogUnlessTaken(deps: SyncDeps, trx: Knex.Transaction, row: Partial<CatalogRow>): Promise<CatalogRow | undefined> {
  try {
    return await trx.transaction((savepoint) => deps.models.insertCatalog(savepoint, row));
  } catch (error) {
    if ((error as { code?: string }).code === '23505') return undefined;
    throw error;
  }
}

/** Whether `a` comes before `b` in the order that decides whose metadata a shared catalog entry carries. */
function precedes(a: { active: boolean; seq: number }, b: { active: boolean; seq: number }): boolean {
  return a.active !== b.active ? a.active : a.seq < b.seq;
}

async function applySync(
  deps: SyncDeps,
  trx: Knex.Transaction,
  providerId: string,
  generation: number,
  upstreamModels: UpstreamModel[],
  skipped: SkippedModel[],
): Promise<SyncResult> {
  // Locks the provider until the commit; waits for a sync committing meanwhile, then sees its generation.
  const row = await deps.providers.claimSyncCommit(trx, providerId, generation);
  if (!row) {
    if (!(await deps.providers.byId(providerId, trx))) throw new SyncError(`provider ${providerId} does not exist`);
    // A sync that fetched later committed first: its list stands.
    return { provider_id: providerId, added: 0, updated: 0, deactivated: 0, skipped: [], models: await deps.models.providerModelsOf(providerId, trx), superseded: true };
  }
  const now = unixSeconds(deps.clock);
  // The rows this sync may write are locked as they are read: an admin's PATCH committed between
  // the read and the write (a name set by hand, a model switched off) would otherwise be judged
  // against the older row, and the sync would write over it. A PATCH arriving meanwhile waits for
  // the commit and is applied after it.
  const existing = new Map((await deps.models.providerModelsOfForUpdate(trx, providerId)).map((pm) => [pm.provider_original_model_id, pm]));
  // A skipped entry is still on the provider's list: its model keeps its last synchronised state
  // rather than being deactivated as vanished.
  const seen = new Set<string>(skipped.flatMap((s) => (s.model_id === null ? [] : [s.model_id])));
  const synced = new Set<string>();
  let added = 0;
  let updated = 0;
  let deactivated = 0;

  // In id order, not the provider's: the catalog entries this sync locks are shared with other
  // providers' syncs, and two syncs locking them in different orders would deadlock (one fails).
  const ordered = [...upstreamModels].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  for (const m of ordered) {
    if (synced.has(m.id)) continue;
    synced.add(m.id);
    seen.add(m.id);
    const derived = derive(m, row, now);
    let catalogChanged = false;
    let catalog = await deps.models.catalogByPublicIdForUpdate(trx, m.id);
    const inserted = catalog ? undefined : await insertCatalogUnlessTaken(deps, trx, {
      id: newId('catalogModel'),
      public_id: m.id,
      status: 'init',
      active: true,
      ...derived.catalog,
      tags: [],
      extras: {},
      manual_fields: [],
      last_synced_at: now,
      created_at: now,
      updated_at: now,
    } as Partial<CatalogRow>);
    if (inserted) {
      catalog = inserted;
    } else {
      // A concurrent sync (another provider offering the same new model) may have created it since.
      catalog ??= await deps.models.catalogByPublicIdForUpdate(trx, m.id);
      if (!catalog) throw new SyncError(`catalog entry '${m.id}' could not be created`);
      // Another provider offering this model may be the one whose metadata the entry carries.
      const sources = await deps.models.catalogSources(catalog.id, trx);
      const owned = !sources.some((source) => source.provider_id !== row.id && precedes(source, row));
      const changes = owned ? diff(catalog as unknown as Record<string, unknown>, derived.catalog as Record<string, unknown>, catalog.manual_fields) : {};
      const patch: Partial<CatalogRow> = { last_synced_at: now };
      if (Object.keys(changes).length) {
        for (const [k, v] of Object.entries(changes)) (patch as Record<string, unknown>)[k] = v.new;
        patch.updated_at = now;
        catalogChanged = true;
        await recordEvent(trx, 'model.updated', { model_id: catalog.public_id, changes, updated_at: iso(deps.clock) });
      }
      catalog = await deps.models.updateCatalog(trx, catalog.id, patch);
    }

    const current = existing.get(m.id);
    if (!current) {
      await deps.models.insertProviderModel(trx, {
        id: newId('providerModel'),
        provider_id: row.id,
        model_catalog_id: catalog.id,
        model_public_id: m.id,
        provider_original_model_id: m.id,
        provider_vendor: row.vendor,
        category: row.category,
        created: derived.created,
        active: true,
        ...derived.pm,
        pricing: { lines: [] },
        manual_fields: [],
        created_at: now,
        updated_at: now,
      } as Partial<ProviderModelRow>);
      added++;
      await recordEvent(trx, 'model.added', {
        model_id: m.id,
        provider: row.name,
        provider_id: row.id,
        capabilities: capabilitiesOf(catalog),
        added_at: iso(deps.clock),
      });
      continue;
    }
    const changes = diff(current as unknown as Record<string, unknown>, derived.pm as Record<string, unknown>, current.manual_fields);
    if (current.sync_deactivated && !current.active) changes.active = { old: false, new: true };
    if (Object.keys(changes).length) {
      const patch: Partial<ProviderModelRow> = { updated_at: now };
      for (const [k, v] of Object.entries(changes)) (patch as Record<string, unknown>)[k] = v.new;
      if (changes.active) patch.sync_deactivated = false;
      await deps.models.updateProviderModel(trx, current.id, patch);
      await recordEvent(trx, 'model.updated', { model_id: current.model_public_id, provider_model_id: current.id, changes, updated_at: iso(deps.clock) });
    }
    if (catalogChanged || Object.keys(changes).length) updated++;
  }

  for (const pm of existing.values()) {
    if (seen.has(pm.provider_original_model_id) || !pm.active) continue;
    await deps.models.updateProviderModel(trx, pm.id, { active: false, sync_deactivated: true, updated_at: now });
    deactivated++;
    await recordEvent(trx, 'model.updated', {
      model_id: pm.model_public_id,
      provider_model_id: pm.id,
      changes: { active: { old: true, new: false } },
      reason: 'vanished_from_provider',
      updated_at: iso(deps.clock),
    });
  }

  await deps.providers.update(trx, row.id, { last_synced_at: now, last_sync_error: skippedSummary(skipped) });
  await deps.models.bumpVersion(trx);
  return { provider_id: row.id, added, updated, deactivated, skipped, models: await deps.models.providerModelsOf(row.id, trx) };
}
