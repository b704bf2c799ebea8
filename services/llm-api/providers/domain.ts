import { ApiError, badRequest, conflict, newId, notFound, recordEvent } from '../../kit/index.js';
import { endpointsOf } from '../models/registry.js';
import { modelSummary, type ProviderModelRow, type ProviderRow } from '../models/types.js';
import type { LlmCore } from '../routing/core.js';
import { randomUUID } from 'node:crypto';
import { diff, PROVIDER_SYNC_QUEUE, syncProvider, SyncError } from './sync.js';
import type { PatchProviderInput, RegisterProviderInput } from './schemas.js';

/** Provider administration: register (then sync models), patch, list, view. */

const nowSec = (core: LlmCore) => Math.floor(core.ctx.runtime.clock.now() / 1000);
const hint = (key: string) => key.slice(-4);

export function providerView(core: LlmCore, row: ProviderRow, options: { admin: boolean; counts?: { total: number; active: number } }) {
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
    view.endpoints = endpointsOf(row).map((e) => ({
      url: e.url,
      healthy: e.healthy !== false && core.health.isHealthy(e.url),
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

function baseUrlOf(input: { base_url?: string; url?: string; endpoints?: { url: string }[] }): string | undefined {
  return input.base_url ?? input.url ?? input.endpoints?.[0]?.url;
}

export async function registerProvider(core: LlmCore, input: RegisterProviderInput) {
  const baseUrl = baseUrlOf(input);
  if (!baseUrl) throw badRequest('One of base_url, url or endpoints is required', 'base_url');
  if (input.base_url && input.url && input.base_url !== input.url) throw badRequest('base_url and url must agree when both are given', 'url');
  const id = newId('provider');
  const now = nowSec(core);
  const knex = core.ctx.runtime.db.knex;
  await knex.transaction(async (trx) => {
    if (await core.providers.byName(input.name, trx)) throw conflict(`A provider named '${input.name}' already exists`, 'name');
    await core.providers.insert(trx, {
      id,
      name: input.name,
      vendor: input.vendor,
      category: input.category,
      base_url: baseUrl,
      api_key_sealed: input.api_key ? core.box.seal(input.api_key, id) : null,
      api_key_hint: input.api_key ? hint(input.api_key) : null,
      active: input.active,
      default_provider_image_edit: input.default_provider_image_edit,
      default_provider_image_generate: input.default_provider_image_generate,
      endpoints: input.endpoints ?? [],
      metadata: input.metadata ?? {},
      last_synced_at: null,
      last_sync_error: null,
      created_at: now,
      updated_at: now,
    });
    await core.models.bumpVersion(trx);
  }).catch((error) => {
    if ((error as { code?: string }).code === '23505') throw conflict(`A provider named '${input.name}' already exists`, 'name');
    throw error;
  });

  let models: ProviderModelRow[] = [];
  let syncError: string | null = null;
  try {
    models = (await syncProvider(core.sync, id)).models;
  } catch (error) {
    if (!(error instanceof SyncError)) throw error;
    syncError = error.message;
  }
  await core.changed();
  const row = (await core.providers.byId(id))!;
  return { ...providerView(core, row, { admin: true }), models: models.map(modelSummary), sync_error: syncError };
}

export async function patchProvider(core: LlmCore, id: string, input: PatchProviderInput) {
  const knex = core.ctx.runtime.db.knex;
  const row = await knex.transaction(async (trx) => {
    const current = await core.providers.byIdForUpdate(trx, id);
    if (!current) throw notFound(`Provider '${id}' not found`);
    if (input.name && input.name.toLowerCase() !== current.name.toLowerCase()) {
      if (await core.providers.byName(input.name, trx)) throw conflict(`A provider named '${input.name}' already exists`, 'name');
    }
    const patch: Partial<ProviderRow> = {};
    for (const key of ['name', 'active', 'default_provider_image_edit', 'default_provider_image_generate', 'metadata', 'endpoints'] as const) {
      if (input[key] !== undefined) (patch as Record<string, unknown>)[key] = input[key];
    }
    const baseUrl = input.base_url ?? input.url;
    if (baseUrl) patch.base_url = baseUrl;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    if (input.api_key !== undefined) {
      const key = input.api_key || null;
      patch.api_key_sealed = key ? core.box.seal(key, id) : null;
      patch.api_key_hint = key ? hint(key) : null;
      changes.api_key = { old: current.api_key_sealed ? '[set]' : null, new: key ? '[set]' : null };
    }
    if (Object.keys(patch).length === 0) return current;
    patch.updated_at = nowSec(core);
    const updated = await core.providers.update(trx, id, patch);
    if (Object.keys(changes).length) {
      await recordEvent(trx, 'model.updated', {
        model_id: null,
        provider_id: id,
        changes,
        updated_at: new Date(core.ctx.runtime.clock.now()).toISOString(),
      });
    }
    await core.models.bumpVersion(trx);
    return updated;
  }).catch((error) => {
    if ((error as { code?: string }).code === '23505') throw conflict(`A provider named '${input.name}' already exists`, 'name');
    throw error;
  });
  await core.changed();
  return providerView(core, row, { admin: true });
}

export async function getProvider(core: LlmCore, id: string) {
  const row = await core.providers.byId(id);
  if (!row) throw notFound(`Provider '${id}' not found`);
  const counts = (await core.providers.counts()).get(id) ?? { total: 0, active: 0 };
  return providerView(core, row, { admin: true, counts });
}

export async function listProvidersAdmin(core: LlmCore) {
  const [rows, counts] = await Promise.all([core.providers.list(), core.providers.counts()]);
  return { object: 'list', data: rows.map((row) => providerView(core, row, { admin: true, counts: counts.get(row.id) ?? { total: 0, active: 0 } })) };
}

/** GET /v1/models/providers: from memory; non-admins see active providers without URLs, endpoints, metadata. */
export function listProvidersPublic(core: LlmCore, admin: boolean) {
  const rows = core.registry.providers().map((p) => p.row).filter((row) => admin || row.active);
  return { object: 'list', data: rows.map((row) => providerView(core, row, { admin })) };
}

export async function syncProviderNow(core: LlmCore, id: string) {
  if (!(await core.providers.byId(id))) throw notFound(`Provider '${id}' not found`);
  try {
    const result = await syncProvider(core.sync, id);
    await core.changed();
    return { object: 'provider.sync', provider_id: id, added: result.added, updated: result.updated, deactivated: result.deactivated, models: result.models.map(modelSummary) };
  } catch (error) {
    if (error instanceof SyncError) throw new ApiError(502, `Could not synchronise models: ${error.message}`);
    throw error;
  }
}

/** Asks the provider-sync worker to re-synchronise one provider or all active ones. */
export async function requestSync(core: LlmCore, providerId?: string) {
  if (providerId && !(await core.providers.byId(providerId))) throw notFound(`Provider '${providerId}' not found`);
  const id = randomUUID();
  await core.ctx.runtime.bus.send(PROVIDER_SYNC_QUEUE, providerId ? { provider_id: providerId } : {}, { messageId: id });
  return { object: 'provider.sync_request', id, provider_id: providerId ?? null, status: 'queued' };
}
