import type { Knex } from 'knex';

export interface ToolSettingRow {
  name: string;
  enabled: boolean;
  reason: string | null;
  updated_by: string | null;
  updated_at: Date;
}

/** SQL of the tool switches. */
export function createToolSettingsStore(knex: Knex) {
  return {
    async all(): Promise<ToolSettingRow[]> {
      return knex('mcp_tool_settings').select('name', 'enabled', 'reason', 'updated_by', 'updated_at');
    },
    /** Locks the tool's row (created on first change) for the transaction, so concurrent PATCHes emit one event each in order. */
    async lock(trx: Knex.Transaction, name: string): Promise<ToolSettingRow | undefined> {
      await trx.raw('insert into mcp_tool_settings (name, enabled) values (?, true) on conflict (name) do nothing', [name]);
      return trx('mcp_tool_settings').where({ name }).forUpdate().first();
    },
    async save(trx: Knex.Transaction, row: { name: string; enabled: boolean; reason: string | null; updated_by: string; updated_at: Date }): Promise<void> {
      await trx('mcp_tool_settings').where({ name: row.name }).update(row);
    },
  };
}
export type ToolSettingsStore = ReturnType<typeof createToolSettingsStore>;
