import { badRequest, notFound, recordEvent, type Page, listEnvelope } from '../../kit/index.js';
import type { LlmCore } from '../routing/core.js';
import { diff } from '../providers/sync.js';
import { catalogView, modelSummary, providerModelView, type CatalogRow, type ProviderModelRow } from './types.js';
import type { PatchCatalogInput, PatchProviderModelInput } from './schemas.js';

const modelNotFound = (id: string) => notFound(`The model '${id}' does not exist or you do not have access to it.`, 'model_not_found');
const nowIso = (core: LlmCore) => new Date(core.ctx.runtime.clock.now()).toISOString();

/** GET /v1/models from memory: active models of active providers, best provider per model. */
export function listModels(core: LlmCore, withProvider: boolean) {
  return {
    object: 'list',
    data: core.registry.listing().map(({ pm, provider }) => {
      const entry: Record<string, unknown> = modelSummary(pm);
      if (withProvider) {
        entry.provider_id = provider.row.id;
        entry.provider_name = provider.row.name;
        entry.provider_vendor = provider.row.vendor;
      }
      return entry;
    }),
  };
}

export function retrieveModel(core: LlmCore, publicId: string) {
  const model = core.registry.resolve(publicId);
  if (!model) throw modelNotFound(publicId);
  return modelSummary(model.candidates[0]!.pm);
}

export async function getCatalog(core: LlmCore, publicId: string) {
  const row = await core.models.catalogByPublicId(publicId);
  if (!row) throw modelNotFound(publicId);
  return catalogView(row);
}

export async function listCatalogs(core: LlmCore, page: Page) {
  const { rows, total } = await core.models.listCatalogs(page);
  return listEnvelope(rows.map(catalogView), total, page);
}

/** A manual update: the patched fields join `manual_fields`, so synchronisation leaves them alone. */
export async function patchCatalog(core: LlmCore, publicId: string, input: PatchCatalogInput) {
  const knex = core.ctx.runtime.db.knex;
  const row = await knex.transaction(async (trx) => {
    const current = await core.models.catalogByPublicId(publicId, trx);
    if (!current) throw modelNotFound(publicId);
    const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<CatalogRow>;
    if (Object.keys(patch).length === 0) return current;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    const manual = [...new Set([...current.manual_fields, ...Object.keys(patch)])].sort();
    const updated = await core.models.updateCatalog(trx, current.id, { ...patch, manual_fields: manual, updated_at: Math.floor(core.ctx.runtime.clock.now() / 1000) });
    if (Object.keys(changes).length) {
      await recordEvent(trx, 'model.updated', { model_id: current.public_id, changes, updated_at: nowIso(core) });
      await core.models.bumpVersion(trx);
    }
    return updated;
  });
  await core.changed();
  return catalogView(row);
}

export async function getProviderModel(core: LlmCore, id: string) {
  const row = await core.models.providerModelById(id);
  if (!row) throw notFound(`Provider model '${id}' not found`);
  return providerModelView(row);
}

export async function listProviderModels(core: LlmCore, providerId: string | undefined, page: Page) {
  const { rows, total } = await core.models.listProviderModels({ providerId }, page);
  return listEnvelope(rows.map(providerModelView), total, page);
}

/** Fields synchronisation would otherwise overwrite on a provider model. */
const SYNCED_FIELDS = new Set(['model_display_name', 'token_limits', 'supports_reasoning', 'supports_images']);

export async function patchProviderModel(core: LlmCore, id: string, input: PatchProviderModelInput) {
  const knex = core.ctx.runtime.db.knex;
  const row = await knex.transaction(async (trx) => {
    const current = await core.models.providerModelById(id, trx);
    if (!current) throw notFound(`Provider model '${id}' not found`);
    if (input.instruct_model_public_id) {
      if (!(await core.models.catalogByPublicId(input.instruct_model_public_id, trx))) {
        throw badRequest(`The model '${input.instruct_model_public_id}' is not in the catalog`, 'instruct_model_public_id', 'model_not_found');
      }
    }
    const patch = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as Partial<ProviderModelRow>;
    if (Object.keys(patch).length === 0) return current;
    const changes = diff(current as unknown as Record<string, unknown>, patch as Record<string, unknown>);
    const manual = [...new Set([...current.manual_fields, ...Object.keys(patch).filter((k) => SYNCED_FIELDS.has(k))])].sort();
    const values: Partial<ProviderModelRow> = { ...patch, manual_fields: manual, updated_at: Math.floor(core.ctx.runtime.clock.now() / 1000) };
    if (patch.active !== undefined) values.sync_deactivated = false;
    const updated = await core.models.updateProviderModel(trx, id, values);
    if (Object.keys(changes).length) {
      await recordEvent(trx, 'model.updated', { model_id: current.model_public_id, provider_model_id: id, changes, updated_at: nowIso(core) });
      await core.models.bumpVersion(trx);
    }
    return updated;
  });
  await core.changed();
  return providerModelView(row);
}
