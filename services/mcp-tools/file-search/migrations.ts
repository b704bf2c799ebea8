import type { Migration } from '../../kit/index.js';

/**
 * Documents and their chunks, per user. Full-text search uses a stored tsvector column with a GIN
 * index (the same SQL runs on PostgreSQL and on PGlite). Embeddings, when an embeddings endpoint
 * is configured, are stored as `real[]`, which needs no extension; ranking by vector similarity
 * happens in the service over the caller's own chunks.
 */
export const fileSearchMigrations: Migration[] = [
  {
    name: '20261122_7100_mcp_file_search',
    async up(knex) {
      await knex.schema.createTable('mcp_documents', (t) => {
        t.string('user_id', 64).notNullable();
        t.string('document_id', 128).notNullable();
        t.jsonb('metadata').notNullable().defaultTo('{}');
        t.specificType('tags', 'text[]').notNullable().defaultTo('{}');
        t.integer('chunk_count').notNullable();
        t.integer('chars').notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
        t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
        t.primary(['user_id', 'document_id']);
      });
      await knex.raw(`
        create table mcp_chunks (
          user_id varchar(64) not null,
          document_id varchar(128) not null,
          ord integer not null,
          text text not null,
          tsv tsvector generated always as (to_tsvector('english', text)) stored,
          embedding real[],
          primary key (user_id, document_id, ord),
          foreign key (user_id, document_id) references mcp_documents (user_id, document_id) on delete cascade
        )`);
      await knex.raw('create index mcp_chunks_tsv on mcp_chunks using gin (tsv)');
      await knex.raw('create index mcp_documents_tags on mcp_documents using gin (tags)');
    },
    async down(knex) {
      await knex.schema.dropTableIfExists('mcp_chunks');
      await knex.schema.dropTableIfExists('mcp_documents');
    },
  },
  {
    // A user's documents go with the user: a deleted `users` row takes its documents (and, through
    // theirs, the chunks) along, as it does the user's media. Documents of users already gone are
    // removed first; the constraint would refuse them.
    name: '20261207_7101_mcp_documents_owner',
    async up(knex) {
      await knex.raw('delete from mcp_documents d where not exists (select 1 from users u where u.id = d.user_id)');
      await knex.raw('alter table mcp_documents add constraint mcp_documents_user_fk foreign key (user_id) references users (id) on delete cascade');
    },
    async down(knex) {
      await knex.raw('alter table mcp_documents drop constraint if exists mcp_documents_user_fk');
    },
  },
];
