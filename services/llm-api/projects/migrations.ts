import type { Migration } from '../../kit/index.js';

/**
 * Projects (SPEC.md 2.1). Soft delete: `deleted_at` is set and the row stays. `activity_seq` orders
 * the list newest activity first with a unique key, so offset pages are stable and index-backed.
 */
export const projectsTables: Migration = {
  name: '20261122_2000_projects_tables',
  async up(knex) {
    await knex.raw('create sequence projects_activity_seq');
    await knex.schema.createTable('projects', (t) => {
      t.string('id', 64).primary(); // proj_…
      t.string('user_id', 64).notNullable().references('id').inTable('users');
      t.string('name', 120).notNullable();
      t.text('instruction');
      t.boolean('is_archived').notNullable().defaultTo(false);
      t.boolean('is_favorite').notNullable().defaultTo(false);
      t.bigInteger('archived_at'); // Unix seconds
      t.bigInteger('created_at').notNullable(); // Unix seconds
      t.bigInteger('updated_at').notNullable();
      t.bigInteger('deleted_at');
      t.bigInteger('activity_seq').notNullable();
    });
    await knex.raw("alter table projects alter column activity_seq set default nextval('projects_activity_seq')");
    await knex.raw('create index projects_user_activity on projects (user_id, activity_seq desc) where deleted_at is null');
  },
  async down(knex) {
    await knex.schema.dropTable('projects');
    await knex.raw('drop sequence if exists projects_activity_seq');
  },
};

export const projectsMigrations: Migration[] = [projectsTables];
