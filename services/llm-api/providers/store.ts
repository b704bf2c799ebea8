import type { Knex } from 'knex';
import type { ProviderRow } from '../models/types.js';

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
