import type { Knex } from 'knex';

/**
 * Providers: where requests for a model go (rows of `llm_providers`; the API key is stored sealed).
 * Numbers come back as numbers (int8 parser in the kit).
 */
export interface EndpointConfig {
  url: string;
  priority: number;
  weight: number;
  /** Administrative switch: false takes the endpoint out of rotation. Runtime health is separate. */
  healthy: boolean;
}

export interface ProviderRow {
  id: string;
  name: string;
  vendor: string;
  category: 'llm' | 'image';
  base_url: string;
  api_key_sealed: string | null;
  api_key_hint: string | null;
  active: boolean;
  default_provider_image_edit: boolean;
  default_provider_image_generate: boolean;
  endpoints: EndpointConfig[];
  metadata: Record<string, string>;
  last_synced_at: number | null;
  last_sync_error: string | null;
  created_at: number;
  updated_at: number;
  seq: number;
  /** The generation of the model list last committed by a sync (null: none yet); see `claimSyncCommit`. */
  synced_generation?: number | null;
}

/** The configured endpoints, or the base URL as the single endpoint. */
export function endpointsOf(row: Pick<ProviderRow, 'endpoints' | 'base_url'>): EndpointConfig[] {
  if (row.endpoints && row.endpoints.length > 0) return row.endpoints;
  return [{ url: row.base_url, priority: 0, weight: 1, healthy: true }];
}

const PROVIDERS = 'llm_providers';

export function createProvidersStore(knex: Knex) {
  return {
    knex,
    async byId(id: string, trx: Knex = knex): Promise<ProviderRow | undefined> {
      return trx(PROVIDERS).where({ id }).first();
    },
    async byIdForUpdate(trx: Knex, id: string): Promise<ProviderRow | undefined> {
      return trx(PROVIDERS).where({ id }).forUpdate().first();
    },
    /**
     * A sync's generation, drawn before it fetches the provider's list: later fetches get larger
     * ones, whatever the clocks say (a sequence, never rolled back).
     */
    async nextSyncGeneration(): Promise<number> {
      const result = await knex.raw("select nextval('llm_provider_sync_generations') as generation");
      return Number(result.rows[0].generation);
    },
    /**
     * Locks the provider for a sync's commit and records its generation, in one statement, unless a
     * sync of a later generation committed first: then (or when the provider is gone) undefined,
     * and nothing changed.
     */
    async claimSyncCommit(trx: Knex, id: string, generation: number): Promise<ProviderRow | undefined> {
      const [row] = await trx(PROVIDERS)
        .where({ id })
        .andWhere((q) => q.whereNull('synced_generation').orWhere('synced_generation', '<', generation))
        .update({ synced_generation: generation })
        .returning('*');
      return row;
    },
    /** A failed sync's error, recorded unless a sync of a later generation committed first. */
    async recordSyncError(trx: Knex, id: string, generation: number, message: string): Promise<void> {
      await trx(PROVIDERS)
        .where({ id })
        .andWhere((q) => q.whereNull('synced_generation').orWhere('synced_generation', '<', generation))
        .update({ last_sync_error: message });
    },
    async byName(name: string, trx: Knex = knex): Promise<ProviderRow | undefined> {
      return trx(PROVIDERS).whereRaw('lower(name) = lower(?)', [name]).first();
    },
    async list(trx: Knex = knex): Promise<ProviderRow[]> {
      return trx(PROVIDERS).orderBy('seq');
    },
    async insert(trx: Knex, row: Omit<ProviderRow, 'seq'>): Promise<ProviderRow> {
      const [created] = await trx(PROVIDERS)
        .insert({ ...row, endpoints: JSON.stringify(row.endpoints), metadata: JSON.stringify(row.metadata) })
        .returning('*');
      return created;
    },
    async update(trx: Knex, id: string, patch: Partial<ProviderRow>): Promise<ProviderRow> {
      const values: Record<string, unknown> = { ...patch };
      if (patch.endpoints) values.endpoints = JSON.stringify(patch.endpoints);
      if (patch.metadata) values.metadata = JSON.stringify(patch.metadata);
      const [updated] = await trx(PROVIDERS).where({ id }).update(values).returning('*');
      return updated;
    },
    /** Removes the provider row (its provider models go with it: ON DELETE CASCADE). */
    async remove(trx: Knex, id: string): Promise<void> {
      await trx(PROVIDERS).where({ id }).delete();
    },
    async counts(): Promise<Map<string, { total: number; active: number }>> {
      const rows = await knex('llm_provider_models')
        .select('provider_id')
        .count<{ provider_id: string; total: number; active: number }[]>({ total: '*' })
        .select(knex.raw('count(*) filter (where active) as active'))
        .groupBy('provider_id');
      return new Map(rows.map((r) => [r.provider_id, { total: Number(r.total), active: Number(r.active) }]));
    },
  };
}

export type ProvidersStore = ReturnType<typeof createProvidersStore>;
