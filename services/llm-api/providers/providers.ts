import type { Knex } from 'knex';
import {
  diff,
  endpointsOf,
  PROVIDER_SYNC_QUEUE,
  syncProvider,
  SyncError,
  type ModelsStore,
  type EndpointConfig,
  type ProviderModelRow,
  type ProviderRow,
  type ProvidersStore,
  type SyncDeps,
  type SyncRunRow,
  type SyncRunsStore,
} from '../../../domains/catalog/index.js';
import {
  ApiError,
  badRequest,
  conflict,
  listEnvelope,
  newId,
  notFound,
  recordEvent,
  storedUrlRefusal,
  unixSeconds,
  type Bus,
  type EgressGuard,
  type Page,
  type Clock,
  type Principal,
  type SecretBox,
} from '../../kit/index.js';
import type { ModelRegistry } from '../models/registry.js';
import { modelSummary } from '../models/types.js';
import { endpointKey, type PatchProviderInput, type RegisterProviderInput } from './schemas.js';

/** Provider administration: register (then sync models), patch, list, view, synchronise. */
export interface ProviderDeps {
  knex: Knex;
  clock: Clock;
  box: SecretBox;
  providers: ProvidersStore;
  models: ModelsStore;
  /** On-demand sync runs and their outcome (`GET /v1/admin/providers/sync/{id}`). */
  syncRuns: SyncRunsStore;
  sync: SyncDeps;
  /** Runtime endpoint health, shown to admins next to the configured flag. */
  health: { isHealthy(url: string): boolean };
  /** The in-memory catalog: read for the public list, reloaded after a change committed here. */
  registry: Pick<ModelRegistry, 'providers' | 'reload'>;
  /** Where on-demand sync requests go (the provider-sync worker's queue). */
  bus: Pick<Bus, 'send'>;
  /**
   * Where provider URLs may point (PROVIDER_URL_ALLOW, the guard of the chat path's pool): a URL
   * sent to register or PATCH, and the URLs a new API key will go to, are checked before they are
   * stored, so a refused destination is a 400 naming the field rather than a provider that fails
   * every request. Every call to a provider is checked again when it is made.
   */
  guard?: Pick<EgressGuard, 'check'>;
}

/** How long an admin request waits for a provider host name to resolve before storing it unchecked (calls check it again). */
const DESTINATION_CHECK_MS = 5_000;

/** Refuses destinations the egress guard refuses; a name that does not resolve (yet) is let through, as a provider may be registered while down. */
async function checkDestinations(deps: Pick<ProviderDeps, 'guard'>, targets: Array<{ url: string; param: string }>): Promise<void> {
  const guard = deps.guard;
  if (!guard) return;
  for (const { url, param } of targets) {
    const refused = await storedUrlRefusal(guard, url, DESTINATION_CHECK_MS);
    // Said as a sync says it, naming the setting that decides (no connection was made, so nothing about the host's ports).
    if (refused) throw badRequest(`The provider URL is not an allowed destination (PROVIDER_URL_ALLOW): ${refused.reason}`, param);
  }
}

/** The URLs of a request body, each with the field that names it. */
function requestedUrls(input: { base_url?: string; url?: string; endpoints?: { url: string }[] }): Array<{ url: string; param: string }> {
  const targets: Array<{ url: string; param: string }> = [];
  if (input.base_url) targets.push({ url: input.base_url, param: 'base_url' });
  else if (input.url) targets.push({ url: input.url, param: 'url' });
  input.endpoints?.forEach((e, i) => targets.push({ url: e.url, param: `endpoints[${i}].url` }));
  return targets;
}

const hint = (key: string) => key.slice(-4);

export function providerView(deps: Pick<ProviderDeps, 'health'>, row: ProviderRow, options: { admin: boolean; counts?: { total: number; active: number } }) {
  const view: Record<string, unknown> = {
    id: row.id,
    object: 'provider',
    name: row.name,
    vendor: row.vendor,
    category: row.category,
    active: row.active,
    default_provider_image_edit: row.default_provider_image_edit,
    default_provider_image_generate: row.default_provider_image_generate,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
  if (options.admin) {
    view.base_url = row.base_url;
    // The administrative switch and the live health apart: a view read and sent back as a PATCH
    // keeps the switch, rather than turning a passing cool-down into a permanent "off".
    view.endpoints = endpointsOf(row).map((e) => ({
      url: e.url,
      enabled: e.healthy !== false,
      healthy: deps.health.isHealthy(e.url),
      priority: e.priority,
      weight: e.weight,
    }));
    view.metadata = row.metadata;
    view.api_key_configured = row.api_key_sealed !== null;
    view.last_synced_at = row.last_synced_at;
    view.last_sync_error = row.last_sync_error;
    if (options.counts) {
      view.model_count = options.counts.total;
      view.model_active_count = options.counts.active;
    }
  }
  return view;
}

/** Endpoints as stored: `enabled`, when given, is the administrative switch (kept in `healthy`). */
function storedEndpoints(endpoints: Array<{ url: string; enabled?: boolean; healthy: boolean; priority: number; weight: number }>): EndpointConfig[] {
  return endpoints.map((e) => ({ url: e.url, priority: e.priority, weight: e.weight, healthy: e.enabled ?? e.healthy }));
}

function baseUrlOf(input: { base_url?: string; url?: string; endpoints?: { url: string }[] }): string | undefined {
  return input.base_url ?? input.url ?? input.endpoints?.[0]?.url;
}

/**
 * `url` is another name of `base_url`: two different values leave no way to know which was meant.
 * Compared as endpoints are (letter case of scheme and host, trailing slash): paths are joined to the
 * URL with its trailing slashes dropped, so `https://x/v1` and `https://x/v1/` reach the same place.
 */
function checkUrlsAgree(input: { base_url?: string; url?: string }): void {
  if (input.base_url && input.url && endpointKey(input.base_url) !== endpointKey(input.url)) throw badRequest('base_url and url must agree when both are given', 'url');
}

export async function registerProvider(deps: ProviderDeps, input: RegisterProviderInput) {
  const baseUrl = baseUrlOf(input);
  if (!baseUrl) throw badRequest('One of base_url, url or endpoints is required', 'base_url');
  checkUrlsAgree(input);
  await checkDestinations(deps, requestedUrls(input));
  const id = newId('provider');
  const now = unixSeconds(deps.clock);
  await deps.knex.transaction(async (trx) => {
    if (await deps.providers.byName(input.name, trx)) throw conflict(`A provider named '${input.name}' already exists`, 'name');
    await deps.providers.insert(trx, {
      id,
      name: input.name,
      vendor: input.vendor,
      category: input.category,
      base_url: baseUrl,
      api_key_sealed: input.api_key ? deps.box.seal(input.api_key, id) : null,
      api_key_hint: input.api_key ? hint(input.api_key) : null,
      active: input.active,
      default_provider_image_edit: input.default_provider_image_edit,
      default_provider_image_generate: input.default_provider_image_generate,
      endpoints: storedEndpoints(input.endpoints ?? []),
      metadata: input.metadata ?? {},
      last_synced_at: null,
      last_sync_error: null,
      created_at: now,
      updated_at: now,
    });
    await deps.models.bumpVersion(trx);
  }).catch((error) => {
    if ((error as { code?: string }).code === '23505') throw conflict(`A provider named '${input.name}' already exists`, 'name');
    throw error;
  });

  let models: ProviderModelRow[] = [];
  let syncError: string | null = null;
  try {
    models = (await syncProvider(deps.sync, id)).models;
  } catch (error) {
    if (!(error instanceof SyncError)) throw error;
    syncError = error.message;
  }
  await deps.registry.reload();
  const row = await deps.providers.byId(id);
  // Deleted by an administrator while its first sync ran: the registration happened, but there is
  // nothing left to describe, and a 201 would name a provider that is not there.
  if (!row) {
    throw new ApiError(409, `Provider '${input.name}' (${id}) was deleted while it was being registered`, { code: 'provider_deleted' });
  }
  return { ...providerView(deps, row, { admin: true }), models: models.map(modelSummary), sync_error: syncError };
}

export async function patchProvider(deps: ProviderDeps, id: string, input: PatchProviderInput) {
  // As on register: otherwise `base_url` was stored and a different `url` silently dropped.
  checkUrlsAgree(input);
  if (deps.guard) {
    // Checked before the row is locked (a name may take a while to resolve). A new key is checked
    // against every URL it will be sent to, the stored ones too: the allow-list may have changed.
    const targets = requestedUrls(input);
    if (input.api_key) {
      const current = await deps.providers.byId(id);
      if (!current) throw notFound(`Provider '${id}' not found`);
      const baseUrl = input.base_url ?? input.url;
      if (!baseUrl) targets.push({ url: current.base_url, param: 'api_key' });
      if (input.endpoints === undefined) for (const e of current.endpoints ?? []) targets.push({ url: e.url, param: 'api_key' });
    }
    await checkDestinations(deps, targets);
  }
  const row = await deps.knex.transaction(async (trx) => {
    const current = await deps.providers.byIdForUpdate(trx, id);
    if (!current) throw notFound(`Provider '${id}' not found`);
    if (input.name && input.name.toLowerCase() !== current.name.toLowerCase()) {
      if (await deps.providers.byName(input.name, trx)) throw conflict(`A provider named '${input.name}' already exists`, 'name');
    }
    const patch: Partial<ProviderRow> = {};
    for (const key of ['name', 'active', 'default_provider_image_edit', 'default_provider_image_generate', 'metadata'] as const) {
      if (input[key] !== undefined) (patch as Record<string, unknown>)[key] = input[key];
    }
    if (input.endpoints !== undefined) patch.endpoints = storedEndpoints(input.endpoints);
    const baseUrl = input.base_url ?? input.url;
    // A provider with endpoints configured is routed and synced through them, never its base URL:
    // a new base URL alone would be stored and change nothing, so it is refused (the same URL sent
    // again, a trailing slash or the host's letter case aside, is no new one).
    if (baseUrl && (current.base_url == null || endpointKey(baseUrl) !== endpointKey(current.base_url)) && input.endpoints === undefined && current.endpoints?.length) {
      throw badRequest(
        'This provider is routed through its configured endpoints, so a new base URL alone would change nothing: edit endpoints instead (or send endpoints with it)',
        input.base_url !== undefined ? 'base_url' : 'url',
      );
    }
    if (baseUrl) patch.base_url = baseUrl;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    if (input.api_key !== undefined) {
      const key = input.api_key || null;
      patch.api_key_sealed = key ? deps.box.seal(key, id) : null;
      patch.api_key_hint = key ? hint(key) : null;
      changes.api_key = { old: current.api_key_sealed ? '[set]' : null, new: key ? '[set]' : null };
    }
    if (Object.keys(patch).length === 0) return current;
    patch.updated_at = unixSeconds(deps.clock);
    const updated = await deps.providers.update(trx, id, patch);
    if (Object.keys(changes).length) {
      // A provider change affects every model it serves: one event per model, each naming it.
      const updatedAt = new Date(deps.clock.now()).toISOString();
      for (const pm of await deps.models.providerModelsOf(id, trx)) {
        await recordEvent(trx, 'model.updated', { model_id: pm.model_public_id, provider_model_id: pm.id, provider_id: id, changes, updated_at: updatedAt });
      }
    }
    await deps.models.bumpVersion(trx);
    return updated;
  }).catch((error) => {
    if ((error as { code?: string }).code === '23505') throw conflict(`A provider named '${input.name}' already exists`, 'name');
    throw error;
  });
  await deps.registry.reload();
  return providerView(deps, row, { admin: true });
}

/** How many model ids a 409 names before "and N more". */
const NAMED_IN_CONFLICT = 10;

/**
 * DELETE /v1/admin/providers/{id}. A provider's models are "referenced" while any of them is
 * enabled (active): clients can reach them under their public ids, so deleting would make requests
 * fail or move silently. Without `force` that is a 409 naming them (disable them first, e.g. with
 * the bulk toggle scoped to the provider); with `force` the provider and all its provider models
 * are removed in one transaction, each enabled one announced as `model.updated` (active → false,
 * reason `provider_deleted`). Catalog entries (public ids with their curated fields) and usage
 * history stay. The name is free to register again at once.
 */
export async function deleteProvider(deps: ProviderDeps, id: string, options: { force: boolean }) {
  const removed = await deps.knex.transaction(async (trx) => {
    const row = await deps.providers.byIdForUpdate(trx, id);
    if (!row) throw notFound(`Provider '${id}' not found`);
    const models = await deps.models.providerModelsOf(id, trx);
    const enabled = models.filter((pm) => pm.active);
    if (enabled.length && !options.force) {
      const named = enabled.slice(0, NAMED_IN_CONFLICT).map((pm) => pm.model_public_id).join(', ');
      const more = enabled.length > NAMED_IN_CONFLICT ? ` and ${enabled.length - NAMED_IN_CONFLICT} more` : '';
      throw new ApiError(
        409,
        `Provider '${row.name}' still serves ${enabled.length} enabled model(s): ${named}${more}. Disable them first, or delete with force=true to remove them too`,
        { code: 'provider_in_use', param: 'force' },
      );
    }
    const updatedAt = new Date(deps.clock.now()).toISOString();
    for (const pm of enabled) {
      await recordEvent(trx, 'model.updated', {
        model_id: pm.model_public_id,
        provider_model_id: pm.id,
        provider_id: id,
        changes: { active: { old: true, new: false } },
        reason: 'provider_deleted',
        updated_at: updatedAt,
      });
    }
    await deps.providers.remove(trx, id);
    await deps.models.bumpVersion(trx);
    return models.length;
  });
  await deps.registry.reload();
  return { id, object: 'provider.deleted', deleted: true, models_removed: removed };
}

export async function getProvider(deps: ProviderDeps, id: string) {
  const row = await deps.providers.byId(id);
  if (!row) throw notFound(`Provider '${id}' not found`);
  const counts = (await deps.providers.counts()).get(id) ?? { total: 0, active: 0 };
  return providerView(deps, row, { admin: true, counts });
}

export async function listProvidersAdmin(deps: ProviderDeps, page: Page) {
  // Providers are few (one row per upstream account), so the page is cut from the full list.
  const [rows, counts] = await Promise.all([deps.providers.list(), deps.providers.counts()]);
  const data = rows.slice(page.offset, page.offset + page.limit).map((row) => providerView(deps, row, { admin: true, counts: counts.get(row.id) ?? { total: 0, active: 0 } }));
  return listEnvelope(data, rows.length, page);
}

/** GET /v1/models/providers: from memory; non-admins see active providers without URLs, endpoints, metadata. */
export function listProvidersPublic(deps: Pick<ProviderDeps, 'registry' | 'health'>, principal: Principal) {
  const admin = principal.isAdmin;
  const rows = deps.registry.providers().map((p) => p.row).filter((row) => admin || row.active);
  return { object: 'list', data: rows.map((row) => providerView(deps, row, { admin })) };
}

/** Synchronises one provider now, recorded as a sync run like the queued ones (`sync_id`). */
export async function syncProviderNow(deps: ProviderDeps, id: string) {
  if (!(await deps.providers.byId(id))) throw notFound(`Provider '${id}' not found`);
  const runId = newId('syncRun');
  await deps.syncRuns.insert({ id: runId, provider_id: id, status: 'running', created_at: unixSeconds(deps.clock) });
  await deps.syncRuns.start(runId, unixSeconds(deps.clock));
  try {
    const result = await syncProvider(deps.sync, id);
    await deps.syncRuns.finish(
      runId,
      { providers_synced: 1, providers_failed: 0, added: result.added, updated: result.updated, deactivated: result.deactivated, failures: [], error: null },
      unixSeconds(deps.clock),
    );
    await deps.registry.reload();
    return { object: 'provider.sync', provider_id: id, sync_id: runId, added: result.added, updated: result.updated, deactivated: result.deactivated, models: result.models.map(modelSummary) };
  } catch (error) {
    const message = error instanceof SyncError ? error.message : 'unexpected error';
    await deps.syncRuns.finish(
      runId,
      { providers_synced: 0, providers_failed: 1, added: 0, updated: 0, deactivated: 0, failures: [{ provider_id: id, error: message }], error: message },
      unixSeconds(deps.clock),
    );
    // Deleted while the sync ran: the provider is what is missing, not a provider that failed to answer.
    if (error instanceof SyncError && !(await deps.providers.byId(id))) throw notFound(`Provider '${id}' not found (it was deleted during the sync)`);
    if (error instanceof SyncError && error.refused) throw new ApiError(400, `Could not synchronise models: ${error.message}`, { param: 'base_url' });
    if (error instanceof SyncError) throw new ApiError(502, `Could not synchronise models: ${error.message}`);
    throw error;
  }
}

/**
 * Asks the provider-sync worker to re-synchronise one provider or all active ones. The run is
 * recorded first (queued), so its id can be followed with `GET /v1/admin/providers/sync/{id}`.
 */
export async function requestSync(deps: ProviderDeps, providerId?: string) {
  if (providerId && !(await deps.providers.byId(providerId))) throw notFound(`Provider '${providerId}' not found`);
  const id = newId('syncRun');
  await deps.syncRuns.insert({ id, provider_id: providerId ?? null, status: 'queued', created_at: unixSeconds(deps.clock) });
  try {
    await deps.bus.send(PROVIDER_SYNC_QUEUE, { ...(providerId ? { provider_id: providerId } : {}), run_id: id }, { messageId: id });
  } catch (error) {
    // Never left queued with nothing to run it.
    await deps.syncRuns.finish(id, { providers_synced: 0, providers_failed: 0, added: 0, updated: 0, deactivated: 0, failures: [], error: 'the request could not be queued' }, unixSeconds(deps.clock)).catch(() => {});
    throw error;
  }
  return { object: 'provider.sync_request', id, provider_id: providerId ?? null, status: 'queued' };
}

export function syncRunView(row: SyncRunRow) {
  return {
    id: row.id,
    object: 'provider.sync_run',
    provider_id: row.provider_id,
    status: row.status,
    providers_synced: row.providers_synced,
    providers_failed: row.providers_failed,
    added: row.added,
    updated: row.updated,
    deactivated: row.deactivated,
    error: row.error,
    failures: row.failures,
    created_at: row.created_at,
    started_at: row.started_at,
    finished_at: row.finished_at,
  };
}

/** `GET /v1/admin/providers/sync`: the recorded runs, newest first, on demand and synchronous alike. */
export async function listSyncRuns(deps: Pick<ProviderDeps, 'syncRuns'>, page: Page) {
  const { rows, total } = await deps.syncRuns.list(page);
  return listEnvelope(rows.map(syncRunView), total, page);
}

export async function getSyncRun(deps: Pick<ProviderDeps, 'syncRuns'>, id: string) {
  const row = await deps.syncRuns.byId(id);
  if (!row) throw notFound(`Sync run '${id}' not found`);
  return syncRunView(row);
}
