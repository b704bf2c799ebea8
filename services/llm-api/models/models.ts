import type { Knex } from 'knex';
import { diff, type CatalogRow, type ModelsStore, type ProviderModelRow, type ProvidersStore } from '../../../domains/catalog/index.js';
import { badRequest, isPending, notFound, recordEvent, unixSeconds, type Clock, type MaybePromise, type Page, type Principal, listEnvelope } from '../../kit/index.js';
import { modelNotFound, type ModelRegistry } from './registry.js';
import { catalogView, modelEntry, providerModelView } from './types.js';
import type { PatchCatalogInput, PatchProviderModelInput } from './schemas.js';

/** Models: the public list and lookup (from memory), the catalog and provider-model administration. */
export interface ModelDeps {
  knex: Knex;
  clock: Clock;
  providers: ProvidersStore;
  models: ModelsStore;
  /** The in-memory catalog: read by the public routes, reloaded after a change committed here. */
  registry: Pick<ModelRegistry, 'listing' | 'resolve' | 'reload'>;
  /**
   * Which models a caller may use (the allow-lists of its key, its user, the guest setting): the
   * public list and lookup show no other. Synchronous when the caller's limits are cached.
   */
  modelAccess(principal: Principal): MaybePromise<(model: string) => boolean>;
}

const nowIso = (deps: ModelDeps) => new Date(deps.clock.now()).toISOString();

/**
 * GET /v1/models from memory: active models of active providers the caller may use, best provider
 * per model.
 */
export function listModels(deps: ModelDeps, principal: Principal, withProvider: boolean) {
  const access = deps.modelAccess(principal);
  return isPending(access) ? access.then((allowed) => modelList(deps, allowed, withProvider)) : modelList(deps, access, withProvider);
}

function modelList(deps: ModelDeps, allowed: (model: string) => boolean, withProvider: boolean) {
  return {
    object: 'list',
    data: deps.registry.listing().flatMap((model) => {
      if (!allowed(model.publicId)) return [];
      const entry: Record<string, unknown> = modelEntry(model);
      if (withProvider) {
        const { provider } = model.candidates[0]!;
        entry.provider_id = provider.row.id;
        entry.provider_name = provider.row.name;
        entry.provider_vendor = provider.row.vendor;
      }
      return [entry];
    }),
  };
}

/** GET /v1/models/{model}: a model the caller may not use does not exist for it (OpenAI's 404). */
export function retrieveModel(deps: ModelDeps, principal: Principal, publicId: string) {
  const access = deps.modelAccess(principal);
  const entry = (allowed: (model: string) => boolean) => {
    const model = deps.registry.resolve(publicId);
    if (!model || !allowed(model.publicId)) throw modelNotFound(publicId, 'model');
    return modelEntry(model);
  };
  return isPending(access) ? access.then(entry) : entry(access);
}

/**
 * A catalog entry. With `principal` (the public route), an entry of a model the caller cannot use
 * (outside its allow-lists, or not served: disabled, or no enabled provider) does not exist for it,
 * as in the model list.
 */
export async function getCatalog(deps: ModelDeps, publicId: string, principal?: Principal) {
  if (principal && (!deps.registry.resolve(publicId) || !(await deps.modelAccess(principal))(publicId))) throw modelNotFound(publicId);
  const row = await deps.models.catalogByPublicId(publicId);
  if (!row) throw modelNotFound(publicId);
  return catalogView(row);
}

export async function listCatalogs(deps: ModelDeps, page: Page) {
  const { rows, total } = await deps.models.listCatalogs(page);
  return listEnvelope(rows.map(catalogView), total, page);
}

/** A manual update: the patched fields join `manual_fields`, so synchronisation leaves them alone. */
export async function patchCatalog(deps: ModelDeps, publicId: string, input: PatchCatalogInput) {
  const row = await deps.knex.transaction(async (trx) => {
    const current = await deps.models.catalogByPublicId(publicId, trx);
    if (!current) throw modelNotFound(publicId);
    const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<CatalogRow>;
    if (Object.keys(patch).length === 0) return current;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    const manual = [...new Set([...current.manual_fields, ...Object.keys(patch)])].sort();
    const updated = await deps.models.updateCatalog(trx, current.id, { ...patch, manual_fields: manual, updated_at: unixSeconds(deps.clock) });
    if (Object.keys(changes).length) {
      await recordEvent(trx, 'model.updated', { model_id: current.public_id, changes, updated_at: nowIso(deps) });
      await deps.models.bumpVersion(trx);
    }
    return updated;
  });
  await deps.registry.reload();
  return catalogView(row);
}

export async function getProviderModel(deps: ModelDeps, id: string) {
  const row = await deps.models.providerModelById(id);
  if (!row) throw notFound(`Provider model '${id}' not found`);
  return providerModelView(row);
}

export async function listProviderModels(deps: ModelDeps, providerId: string | undefined, page: Page) {
  const { rows, total } = await deps.models.listProviderModels({ providerId }, page);
  return listEnvelope(rows.map(providerModelView), total, page);
}

/** Fields synchronisation would otherwise overwrite on a provider model. */
const SYNCED_FIELDS = new Set(['model_display_name', 'token_limits', 'supports_reasoning', 'supports_images']);

export async function patchProviderModel(deps: ModelDeps, id: string, input: PatchProviderModelInput) {
  const row = await deps.knex.transaction(async (trx) => {
    const current = await deps.models.providerModelById(id, trx);
    if (!current) throw notFound(`Provider model '${id}' not found`);
    if (input.instruct_model_public_id) {
      // Itself as its instruct model would make enable_thinking=false serve it with thinking on.
      if (input.instruct_model_public_id === current.model_public_id) {
        throw badRequest(`A model cannot be its own instruct model ('${current.model_public_id}')`, 'instruct_model_public_id');
      }
      if (!(await deps.models.catalogByPublicId(input.instruct_model_public_id, trx))) {
        throw badRequest(`The model '${input.instruct_model_public_id}' is not in the catalog`, 'instruct_model_public_id', 'model_not_found');
      }
    }
    const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<ProviderModelRow>;
    if (Object.keys(patch).length === 0) return current;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    const manual = [...new Set([...current.manual_fields, ...Object.keys(patch).filter((k) => SYNCED_FIELDS.has(k))])].sort();
    const values: Partial<ProviderModelRow> = { ...patch, manual_fields: manual, updated_at: unixSeconds(deps.clock) };
    if (patch.active !== undefined) values.sync_deactivated = false;
    const updated = await deps.models.updateProviderModel(trx, id, values);
    if (Object.keys(changes).length) {
      await recordEvent(trx, 'model.updated', { model_id: current.model_public_id, provider_model_id: id, changes, updated_at: nowIso(deps) });
      await deps.models.bumpVersion(trx);
    }
    return updated;
  });
  await deps.registry.reload();
  return providerModelView(row);
}
