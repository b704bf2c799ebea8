import type { Migration } from '../../kit/index.js';

/**
 * Identity tables. Times the domain reasons about (expiry, rotation) are bigint milliseconds from
 * the injectable Clock, so tests move them with ManualClock; `created_at` of users stays the kit's.
 */
export const identityUsersColumns: Migration = {
  name: '20261122_1000_identity_users_columns',
  async up(knex) {
    await knex.schema.alterTable('users', (t) => {
      t.boolean('email_verified').notNullable().defaultTo(false);
      t.string('full_name', 256);
    });
    await knex.raw('create index users_email_lower on users (lower(email))');
    await knex.raw('create index users_username_lower on users (lower(username))');
  },
  async down(knex) {
    await knex.raw('drop index if exists users_username_lower');
    await knex.raw('drop index if exists users_email_lower');
    await knex.schema.alterTable('users', (t) => {
      t.dropColumn('full_name');
      t.dropColumn('email_verified');
    });
  },
};

export const identitySigningKeys: Migration = {
  name: '20261122_1001_identity_signing_keys',
  async up(knex) {
    await knex.schema.createTable('identity_signing_keys', (t) => {
      t.string('kid', 64).primary();
      t.string('alg', 16).notNullable();
      t.jsonb('public_jwk').notNullable();
      t.jsonb('private_jwk').notNullable();
      t.bigInteger('created_at').notNullable();
      // Set when a newer key takes over signing; the key stays in the JWKS until its tokens expired.
      t.bigInteger('retired_at');
    });
  },
  async down(knex) {
    await knex.schema.dropTable('identity_signing_keys');
  },
};

export const identityRefreshTokens: Migration = {
  name: '20261122_1002_identity_refresh_tokens',
  async up(knex) {
    await knex.schema.createTable('identity_refresh_tokens', (t) => {
      t.bigIncrements('id');
      t.string('token_hash', 64).notNullable().unique();
      t.string('family_id', 64).notNullable();
      t.string('user_id', 64).notNullable().references('id').inTable('users').onDelete('CASCADE');
      t.bigInteger('created_at').notNullable();
      t.bigInteger('expires_at').notNullable();
      t.bigInteger('family_expires_at').notNullable();
      t.bigInteger('used_at');
      t.bigInteger('revoked_at');
    });
    await knex.raw('create index identity_refresh_tokens_family on identity_refresh_tokens (family_id)');
    await knex.raw('create index identity_refresh_tokens_user on identity_refresh_tokens (user_id)');
  },
  async down(knex) {
    await knex.schema.dropTable('identity_refresh_tokens');
  },
};

export const identityApiKeys: Migration = {
  name: '20261122_1003_identity_api_keys',
  async up(knex) {
    await knex.schema.createTable('identity_api_keys', (t) => {
      t.string('id', 64).primary(); // key_…
      t.string('user_id', 64).notNullable().references('id').inTable('users').onDelete('CASCADE');
      t.string('name', 256).notNullable();
      t.string('key_hash', 64).notNullable().unique(); // sha256 hex of the secret; the secret is never stored
      t.string('prefix', 16).notNullable();
      t.string('last_four', 4).notNullable();
      t.string('tier', 16).notNullable().defaultTo('free');
      t.jsonb('limits'); // custom limits set by an admin; null = the tier's defaults
      t.bigInteger('created_at').notNullable();
      t.bigInteger('last_used_at');
      t.bigInteger('expires_at');
    });
    await knex.raw('create index identity_api_keys_user on identity_api_keys (user_id)');
    await knex.raw('create index identity_api_keys_expires on identity_api_keys (expires_at) where expires_at is not null');
  },
  async down(knex) {
    await knex.schema.dropTable('identity_api_keys');
  },
};

/**
 * Private signing keys are sealed with the secret box under MASTER_KEY (`private_jwk_sealed`).
 * Rows written before hold the plaintext JWK in `private_jwk`: the key ring seals them at start
 * (it needs the master key, which migrations do not see) and clears the plaintext column.
 */
export const identitySealedSigningKeys: Migration = {
  name: '20261122_1004_identity_sealed_signing_keys',
  async up(knex) {
    await knex.schema.alterTable('identity_signing_keys', (t) => {
      t.text('private_jwk_sealed');
    });
    await knex.raw('alter table identity_signing_keys alter column private_jwk drop not null');
  },
  async down(knex) {
    await knex.schema.alterTable('identity_signing_keys', (t) => {
      t.dropColumn('private_jwk_sealed');
    });
  },
};

/**
 * Password sign-in of the embedded issuer. `identity_passwords` holds one scrypt hash per user (the
 * encoded string carries its parameters and salt; never the password). `identity_login_attempts`
 * counts failed sign-ins per e-mail address, known or not (keyed by a hash of the lower-cased
 * address), so the lockout answers the same for addresses nobody holds.
 */
export const identityPasswords: Migration = {
  name: '20261123_1000_identity_passwords',
  async up(knex) {
    await knex.schema.createTable('identity_passwords', (t) => {
      t.string('user_id', 64).primary().references('id').inTable('users').onDelete('CASCADE');
      t.text('hash').notNullable();
      t.bigInteger('updated_at').notNullable();
    });
    await knex.schema.createTable('identity_login_attempts', (t) => {
      t.string('email_key', 64).primary();
      t.integer('failures').notNullable().defaultTo(0);
      t.bigInteger('locked_until');
      t.bigInteger('updated_at').notNullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTable('identity_login_attempts');
    await knex.schema.dropTable('identity_passwords');
  },
};

/**
 * Sign-in attempts are reserved before the password is checked, so concurrent guesses cannot all
 * pass the lockout check. `attempts` numbers the attempts an address has had since its row was
 * made (each reservation takes the next number); attempts numbered up to `counted_from` no longer
 * count (a success, an ended window or an administrator's reset wrote them off). `failures` stays
 * the number that counts, `attempts - counted_from`: the attempts still being checked and those that
 * failed. Rows written before count their failures as attempts.
 */
export const identityLoginReservations: Migration = {
  name: '20261201_1000_identity_login_reservations',
  async up(knex) {
    await knex.schema.alterTable('identity_login_attempts', (t) => {
      t.bigInteger('attempts').notNullable().defaultTo(0);
      t.bigInteger('counted_from').notNullable().defaultTo(0);
    });
    await knex('identity_login_attempts').update({ attempts: knex.ref('failures') });
  },
  async down(knex) {
    await knex.schema.alterTable('identity_login_attempts', (t) => {
      t.dropColumn('counted_from');
      t.dropColumn('attempts');
    });
  },
};

export const identityMigrations: Migration[] = [
  identityUsersColumns,
  identitySigningKeys,
  identityRefreshTokens,
  identityApiKeys,
  identitySealedSigningKeys,
  identityPasswords,
  identityLoginReservations,
];
