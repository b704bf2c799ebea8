import type { Migration, MigrationSet } from '../../services/kit/data/index.js';

/**
 * Two tables:
 * - `media_objects`: one row per stored object, keyed by the SHA-256 of its sanitised bytes
 *   (content-addressed: identical bytes are stored once, whoever uploads them). `touched_at` is
 *   set before every write of the object, so the collector never removes an object an upload is
 *   about to reference.
 * - `media`: one row per user-visible media id. `state`: `pending` (reserved for a direct upload),
 *   `completing` (the client said the upload is done; finalisation may be retried), `ready`,
 *   `merged` (a completed upload turned out to duplicate the user's `merged_into` media).
 *   Per-user dedup is a unique index on (user_id, sha256) over ready rows.
 */
export const mediaTables: Migration = {
  name: '20261122_5000_media_tables',
  async up(knex) {
    await knex.schema.createTable('media_objects', (t) => {
      t.string('sha256', 64).primary();
      t.bigInteger('bytes').notNullable();
      t.string('mime_type', 64).notNullable();
      t.timestamp('touched_at', { useTz: true }).notNullable();
    });
    await knex.schema.createTable('media', (t) => {
      t.string('id', 40).primary(); // jan_<ulid>
      t.string('user_id', 64).notNullable().references('id').inTable('users').onDelete('cascade');
      t.string('state', 16).notNullable();
      t.string('sha256', 64);
      t.string('mime_type', 64).notNullable();
      t.bigInteger('bytes').notNullable(); // declared size while pending, real size once ready
      t.integer('width');
      t.integer('height');
      t.string('filename', 255);
      t.string('upload_key', 128); // staging object of a direct upload
      t.string('merged_into', 40);
      t.bigInteger('created_at').notNullable(); // Unix seconds
      t.bigInteger('expires_at'); // reservations only
    });
    await knex.raw("create unique index media_user_sha on media (user_id, sha256) where state = 'ready'");
    await knex.raw("create index media_user_list on media (user_id, id desc) where state = 'ready'");
    await knex.raw('create index media_sha on media (sha256)');
    await knex.raw("create index media_reservations on media (expires_at) where state in ('pending', 'completing', 'merged')");
  },
  async down(knex) {
    await knex.schema.dropTable('media');
    await knex.schema.dropTable('media_objects');
  },
};

/**
 * `media_staging`: every staging key a direct-upload URL was signed for, with the time its URL has
 * expired (plus a margin for clock skew). An S3 presigned PUT cannot be revoked: after a complete,
 * a refusal, a cancel or the owner's deletion, the URL still writes until it expires, and nothing
 * else would remember that key. The sweep deletes the key once more after that time.
 */
export const mediaStaging: Migration = {
  name: '20261207_5001_media_staging',
  async up(knex) {
    await knex.schema.createTable('media_staging', (t) => {
      t.string('upload_key', 128).primary();
      t.bigInteger('delete_after').notNullable(); // Unix seconds
    });
    await knex.raw('create index media_staging_due on media_staging (delete_after)');
  },
  async down(knex) {
    await knex.schema.dropTable('media_staging');
  },
};

/**
 * Indexes for two queries of the sweep that read a whole table on every pass: the objects
 * untouched since the collector's grace (`media_objects.touched_at`), and the ready media still
 * naming a staging object (a finalisation stopped before removing it: rare, so a partial index
 * holds only those rows).
 */
export const mediaSweepIndexes: Migration = {
  name: '20261207_5002_media_sweep_indexes',
  async up(knex) {
    await knex.raw('create index media_objects_touched on media_objects (touched_at)');
    await knex.raw("create index media_ready_upload_key on media (id) where state = 'ready' and upload_key is not null");
  },
  async down(knex) {
    await knex.raw('drop index if exists media_ready_upload_key');
    await knex.raw('drop index if exists media_objects_touched');
  },
};

export const mediaMigrations: MigrationSet = { owner: 'media_api', migrations: [mediaTables, mediaStaging, mediaSweepIndexes] };
