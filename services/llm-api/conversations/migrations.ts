import type { Migration } from '../../kit/index.js';

/**
 * Conversations, items and branches.
 *
 * - `conversations`: soft delete (`deleted_at`); `activity_seq` (from a sequence, renewed on every
 *   change or new item) orders the list newest activity first with a unique, index-backed key.
 * - `conversation_items`: each item stored once, immutable, never physically removed by item
 *   deletion (ids are random `msg_…` and never reused).
 * - `conversation_branches`: named branches with a surrogate id, so swapping `MAIN` is a rename of
 *   two rows, never a relabelling of items.
 * - `branch_items`: a branch is an ordered list of references `(branch_id, position) → item_id`;
 *   `position` is the item's per-branch `sequence_number`.
 */
export const conversationsTables: Migration = {
  name: '20261122_2100_conversations_tables',
  async up(knex) {
    await knex.raw('create sequence conversations_activity_seq');
    await knex.schema.createTable('conversations', (t) => {
      t.string('id', 64).primary(); // conv_…
      t.string('user_id', 64).notNullable().references('id').inTable('users');
      t.string('project_id', 64).references('id').inTable('projects');
      t.string('title', 256);
      t.string('referrer', 256);
      t.jsonb('metadata').notNullable().defaultTo('{}');
      t.string('active_branch', 64).notNullable().defaultTo('MAIN');
      t.integer('backup_seq').notNullable().defaultTo(0);
      t.bigInteger('created_at').notNullable(); // Unix seconds
      t.bigInteger('updated_at').notNullable();
      t.bigInteger('deleted_at');
      t.bigInteger('activity_seq').notNullable();
    });
    await knex.raw("alter table conversations alter column activity_seq set default nextval('conversations_activity_seq')");
    await knex.raw('create index conversations_user_activity on conversations (user_id, activity_seq desc) where deleted_at is null');
    await knex.raw(
      'create index conversations_user_project_activity on conversations (user_id, project_id, activity_seq desc) where deleted_at is null and project_id is not null',
    );
    await knex.raw(
      'create index conversations_user_referrer_activity on conversations (user_id, referrer, activity_seq desc) where deleted_at is null and referrer is not null',
    );
    await knex.raw('create index conversations_project on conversations (project_id) where project_id is not null');

    await knex.schema.createTable('conversation_items', (t) => {
      t.string('id', 64).primary(); // msg_…
      t.string('conversation_id', 64).notNullable().references('id').inTable('conversations');
      t.string('type', 64).notNullable();
      t.string('role', 32);
      t.jsonb('body').notNullable(); // every other field of the item, as given (normalised)
      t.bigInteger('created_at').notNullable(); // ms since epoch; served as ISO 8601
    });
    await knex.raw('create index conversation_items_conversation on conversation_items (conversation_id)');

    await knex.schema.createTable('conversation_branches', (t) => {
      t.bigIncrements('id');
      t.string('conversation_id', 64).notNullable().references('id').inTable('conversations');
      t.string('name', 64).notNullable();
      t.text('description');
      t.string('parent_branch', 64);
      t.string('forked_from_item_id', 64);
      t.bigInteger('created_at').notNullable(); // Unix seconds
      t.bigInteger('updated_at').notNullable();
      t.unique(['conversation_id', 'name']);
    });

    await knex.schema.createTable('branch_items', (t) => {
      t.bigInteger('branch_id').notNullable().references('id').inTable('conversation_branches').onDelete('CASCADE');
      t.integer('position').notNullable(); // 1-based sequence_number within the branch
      t.string('item_id', 64).notNullable().references('id').inTable('conversation_items');
      t.primary(['branch_id', 'position']);
      t.unique(['branch_id', 'item_id']);
    });
    await knex.raw('create index branch_items_item on branch_items (item_id)');
  },
  async down(knex) {
    await knex.schema.dropTable('branch_items');
    await knex.schema.dropTable('conversation_branches');
    await knex.schema.dropTable('conversation_items');
    await knex.schema.dropTable('conversations');
    await knex.raw('drop sequence if exists conversations_activity_seq');
  },
};

export const conversationsMigrations: Migration[] = [conversationsTables];
