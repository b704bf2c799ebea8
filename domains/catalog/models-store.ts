import type { Knex } from 'knex';

/**
 * The model catalog (one entry per public model id) and provider models (one per provider offering
 * it). Numbers come back as numbers (int8 parser in the kit).
 */
export const CATALOG_FLAGS = ['audio', 'browser', 'embeddings', 'images', 'instruct', 'reasoning', 'tools', 'video'] as const;
export const PROVIDER_MODEL_FLAGS = ['audio', 'embeddings', 'images', 'instruct', 'reasoning', 'video'] as const;

export interface CatalogRow {
  id: string;
  public_id: string;
  model_display_name: string;
  description: string | null;
  family: string | null;
  notes: string | null;
  requires_feature_flag: string | null;
  status: string;
  active: boolean;
  experimental: boolean;
  is_moderated: boolean;
  supports_audio: boolean;
  supports_browser: boolean;
  supports_embeddings: boolean;
  supports_images: boolean;
  supports_instruct: boolean;
  supports_reasoning: boolean;
  supports_tools: boolean;
  supports_video: boolean;
  context_length: number | null;
  tags: string[];
  extras: Record<string, unknown>;
  architecture: Record<string, unknown> | null;
  supported_parameters: Record<string, unknown> | null;
  manual_fields: string[];
  last_synced_at: number | null;
  created_at: number;
  updated_at: number;
}

export interface PricingLine {
  amount_micro_usd: number;
  currency: string;
  unit: string;
}

export interface ProviderModelRow {
  id: string;
  provider_id: string;
  model_catalog_id: string;
  model_public_id: string;
  provider_original_model_id: string;
  provider_vendor: string;
  category: string;
  family: string | null;
  model_display_name: string;
  instruct_model_public_id: string | null;
  owned_by: string;
  created: number;
  active: boolean;
  sync_deactivated: boolean;
  supports_audio: boolean;
  supports_embeddings: boolean;
  supports_images: boolean;
  supports_instruct: boolean;
  supports_reasoning: boolean;
  supports_video: boolean;
  category_order_number: number;
  model_order_number: number;
  pricing: { lines: PricingLine[] };
  token_limits: { context_length?: number; max_completion_tokens?: number };
  manual_fields: string[];
  created_at: number;
  updated_at: number;
}

/** Capabilities named in model.added events. */
export function capabilitiesOf(row: Pick<CatalogRow, `supports_${(typeof CATALOG_FLAGS)[number]}`> | Partial<Record<string, unknown>>): string[] {
  const out = ['chat'];
  for (const f of CATALOG_FLAGS) if ((row as Record<string, unknown>)[`supports_${f}`]) out.push(f);
  return out;
}


const CATALOGS = 'llm_model_catalogs';
const PROVIDER_MODELS = 'llm_provider_models';

const catalogJson = ['tags', 'extras', 'architecture', 'supported_parameters', 'manual_fields'] as const;
const pmJson = ['pricing', 'token_limits', 'manual_fields'] as const;

function encode(row: Record<string, unknown>, jsonKeys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = { ...row };
  for (const k of jsonKeys) if (k in out && out[k] !== null && out[k] !== undefined) out[k] = JSON.stringify(out[k]);
  return out;
}

export function createModelsStore(knex: Knex) {
  return {
    knex,
    async catalogByPublicId(publicId: string, trx: Knex = knex): Promise<CatalogRow | undefined> {
      return trx(CATALOGS).where({ public_id: publicId }).first();
    },
    async catalogsByPublicIds(ids: string[], trx: Knex = knex): Promise<CatalogRow[]> {
      return ids.length ? trx(CATALOGS).whereIn('public_id', ids) : [];
    },
    /**
     * A catalog entry locked against other writers until the transaction ends (a sync's read, so an
     * admin PATCH cannot slip in before its write). FOR NO KEY UPDATE, the lock its UPDATE takes
     * anyway: another provider's sync inserting a provider model that refers to the entry (its
     * foreign key check takes KEY SHARE) is not held up by it. Two syncs that lock the same entry
     * still wait for each other there; they lock entries in id order, so they never deadlock.
     */
    async catalogByPublicIdForUpdate(trx: Knex, publicId: string): Promise<CatalogRow | undefined> {
      return trx(CATALOGS).where({ public_id: publicId }).forNoKeyUpdate().first();
    },
    async catalogById(id: string, trx: Knex = knex): Promise<CatalogRow | undefined> {
      return trx(CATALOGS).where({ id }).first();
    },
    async listCatalogs(page: { limit: number; offset: number }): Promise<{ rows: CatalogRow[]; total: number }> {
      const [{ count }] = await knex(CATALOGS).count<{ count: number }[]>({ count: '*' });
      const rows = await knex(CATALOGS).orderBy('public_id').limit(page.limit).offset(page.offset);
      return { rows, total: Number(count) };
    },
    async allCatalogs(trx: Knex = knex): Promise<CatalogRow[]> {
      return trx(CATALOGS).select('*');
    },
    async insertCatalog(trx: Knex, row: Partial<CatalogRow>): Promise<CatalogRow> {
      const [created] = await trx(CATALOGS).insert(encode(row, catalogJson)).returning('*');
      return created;
    },
    async updateCatalog(trx: Knex, id: string, patch: Partial<CatalogRow>): Promise<CatalogRow> {
      const [updated] = await trx(CATALOGS).where({ id }).update(encode(patch, catalogJson)).returning('*');
      return updated;
    },

    async providerModelById(id: string, trx: Knex = knex): Promise<ProviderModelRow | undefined> {
      return trx(PROVIDER_MODELS).where({ id }).first();
    },
    async providerModelsOf(providerId: string, trx: Knex = knex): Promise<ProviderModelRow[]> {
      return trx(PROVIDER_MODELS).where({ provider_id: providerId }).orderBy(['model_order_number', 'model_public_id']);
    },
    /**
     * A provider's models locked until the transaction ends, in id order (as the bulk toggles lock
     * them, so neither waits on the other in a cycle).
     */
    async providerModelsOfForUpdate(trx: Knex, providerId: string): Promise<ProviderModelRow[]> {
      return trx(PROVIDER_MODELS).where({ provider_id: providerId }).orderBy('id').forNoKeyUpdate();
    },
    async allProviderModels(trx: Knex = knex): Promise<ProviderModelRow[]> {
      return trx(PROVIDER_MODELS).select('*');
    },
    async listProviderModels(filter: { providerId?: string }, page: { limit: number; offset: number }) {
      const base = () => {
        const q = knex(PROVIDER_MODELS);
        if (filter.providerId) q.where({ provider_id: filter.providerId });
        return q;
      };
      const [{ count }] = await base().count<{ count: number }[]>({ count: '*' });
      const rows: ProviderModelRow[] = await base().orderBy(['model_order_number', 'model_public_id', 'id']).limit(page.limit).offset(page.offset);
      return { rows, total: Number(count) };
    },
    /** Provider models in a bulk-toggle scope, locked for the update. */
    async providerModelsForUpdate(trx: Knex, scope: { providerId?: string; catalogIds?: string[] }): Promise<ProviderModelRow[]> {
      const q = trx(PROVIDER_MODELS).select('*').orderBy('id').forUpdate();
      if (scope.providerId) q.where({ provider_id: scope.providerId });
      if (scope.catalogIds) q.whereIn('model_catalog_id', scope.catalogIds);
      return q;
    },
    async insertProviderModel(trx: Knex, row: Partial<ProviderModelRow>): Promise<ProviderModelRow> {
      const [created] = await trx(PROVIDER_MODELS).insert(encode(row, pmJson)).returning('*');
      return created;
    },
    async updateProviderModel(trx: Knex, id: string, patch: Partial<ProviderModelRow>): Promise<ProviderModelRow> {
      const [updated] = await trx(PROVIDER_MODELS).where({ id }).update(encode(patch, pmJson)).returning('*');
      return updated;
    },
    /**
     * The providers whose model lists offer a catalog entry now (their provider model was not
     * deactivated for vanishing), in the order that decides whose metadata the entry carries:
     * active providers first, then registration order.
     */
    async catalogSources(catalogId: string, trx: Knex = knex): Promise<Array<{ provider_id: string; active: boolean; seq: number }>> {
      return trx(`${PROVIDER_MODELS} as pm`)
        .join('llm_providers as p', 'p.id', 'pm.provider_id')
        .where({ 'pm.model_catalog_id': catalogId, 'pm.sync_deactivated': false })
        .select('p.id as provider_id', 'p.active', 'p.seq')
        .orderBy([{ column: 'p.active', order: 'desc' }, { column: 'p.seq', order: 'asc' }]);
    },
    async setProviderModelsActive(trx: Knex, ids: string[], active: boolean, now: number): Promise<void> {
      if (ids.length) await trx(PROVIDER_MODELS).whereIn('id', ids).update({ active, sync_deactivated: false, updated_at: now });
    },

    /** Called in every transaction that changes providers or models: other processes reload. */
    async bumpVersion(trx: Knex): Promise<void> {
      await trx('llm_catalog_state').where({ id: 1 }).increment('version', 1);
    },
    async version(): Promise<number> {
      const row = await knex('llm_catalog_state').where({ id: 1 }).first('version');
      return Number(row?.version ?? 0);
    },
  };
}

export type ModelsStore = ReturnType<typeof createModelsStore>;
