import { badRequest, notFound, recordEvent } from '../../kit/index.js';
import type { ModelDeps } from './models.js';

/**
 * Bulk toggles (SPEC.md 4.5, 2.8). In scope: every provider model (or those of `provider_id`, or of
 * the given catalogs). Per model: excepted or already in the target state → skipped; enabling a
 * model whose provider or catalog entry is inactive → failed (it would stay unavailable); otherwise
 * updated.
 * `except_models` entries match a model public id or a provider-model id; one that matches no model
 * at all (a typo) is a 400 naming it, before anything changes: ignored, it would let the toggle reach
 * the very model it was meant to spare. A catalog named twice counts once.
 */
export interface BulkResult {
  updated_count: number;
  failed_count: number;
  skipped_count: number;
  total_checked: number;
  failed_models: string[];
}

export async function bulkToggle(
  deps: ModelDeps,
  input: { enable: boolean; except_models: string[]; provider_id?: string; catalog_ids?: string[] },
): Promise<BulkResult> {
  const except = new Set(input.except_models);
  const result = await deps.knex.transaction(async (trx) => {
    const result: BulkResult = { updated_count: 0, failed_count: 0, skipped_count: 0, total_checked: 0, failed_models: [] };
    if (input.provider_id && !(await deps.providers.byId(input.provider_id, trx))) throw notFound(`Provider '${input.provider_id}' not found`);
    let catalogIds: string[] | undefined;
    if (input.catalog_ids && input.catalog_ids.length > 0) {
      catalogIds = [];
      for (const ref of new Set(input.catalog_ids)) {
        const catalog = (await deps.models.catalogById(ref, trx)) ?? (await deps.models.catalogByPublicId(ref, trx));
        if (catalog) catalogIds.push(catalog.id);
        else {
          result.total_checked++;
          result.failed_count++;
          result.failed_models.push(ref);
        }
      }
    }
    const scope = await deps.models.providerModelsForUpdate(trx, { providerId: input.provider_id, catalogIds });
    const inScope = new Set(scope.flatMap((pm) => [pm.model_public_id, pm.id]));
    if (input.except_models.some((ref) => !inScope.has(ref))) {
      const known = new Set((await deps.models.allProviderModels(trx)).flatMap((pm) => [pm.model_public_id, pm.id]));
      const unknown = input.except_models.findIndex((ref) => !known.has(ref));
      if (unknown >= 0) {
        throw badRequest(`except_models: '${input.except_models[unknown]}' matches no model public id or provider model id`, `except_models[${unknown}]`);
      }
    }
    const providers = new Map((await deps.providers.list(trx)).map((p) => [p.id, p]));
    const inactiveCatalogs = new Set(input.enable ? (await deps.models.allCatalogs(trx)).filter((c) => !c.active).map((c) => c.id) : []);
    const toChange: typeof scope = [];
    result.total_checked += scope.length;
    for (const pm of scope) {
      if (except.has(pm.model_public_id) || except.has(pm.id) || pm.active === input.enable) result.skipped_count++;
      else if (input.enable && (!providers.get(pm.provider_id)?.active || inactiveCatalogs.has(pm.model_catalog_id))) {
        result.failed_count++;
        result.failed_models.push(pm.model_public_id);
      } else toChange.push(pm);
    }
    const now = deps.clock.now();
    await deps.models.setProviderModelsActive(trx, toChange.map((pm) => pm.id), input.enable, Math.floor(now / 1000));
    for (const pm of toChange) {
      await recordEvent(trx, 'model.updated', {
        model_id: pm.model_public_id,
        provider_model_id: pm.id,
        provider_id: pm.provider_id,
        changes: { active: { old: pm.active, new: input.enable } },
        updated_at: new Date(now).toISOString(),
      });
    }
    result.updated_count = toChange.length;
    if (toChange.length) await deps.models.bumpVersion(trx);
    return result;
  });
  if (result.updated_count) await deps.registry.reload();
  return result;
}
