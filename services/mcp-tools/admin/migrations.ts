import type { Migration } from '../../kit/index.js';

/**
 * The enabled state of each tool, shared by every mcp-tools process. A tool without a row is
 * enabled (a new tool shipped in a release is on until an administrator switches it off).
 */
export const adminMigrations: Migration[] = [
  {
    name: '20261122_7000_mcp_tool_settings',
    async up(knex) {
      await knex.schema.createTable('mcp_tool_settings', (t) => {
        t.string('name', 64).primary();
        t.boolean('enabled').notNullable();
        t.text('reason');
        t.string('updated_by', 64);
        t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
      });
    },
    async down(knex) {
      await knex.schema.dropTableIfExists('mcp_tool_settings');
    },
  },
];
