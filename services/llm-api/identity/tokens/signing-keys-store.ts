import type { JWK } from 'jose';
import type { Knex } from 'knex';

export type SigningAlg = 'ES256' | 'RS256';

/** A row of identity_signing_keys. */
export interface SigningKeyRow {
  kid: string;
  alg: SigningAlg;
  public_jwk: JWK;
  /** Plaintext only in rows written before sealing; the key ring's `sealPlaintextKeys` clears it. */
  private_jwk: JWK | null;
  private_jwk_sealed: string | null;
  created_at: number;
  retired_at: number | null;
}

const LOCK_KEY = 0x1d3471; // advisory lock serialising key creation and rotation across processes

/** The embedded issuer's signing keys table: the only place its SQL is written. */
export function createSigningKeyStore(knex: Knex) {
  return {
    knex,
    /** Serialises key creation, sealing and rotation across processes until the transaction ends. */
    async lock(trx: Knex): Promise<void> {
      await trx.raw('select pg_advisory_xact_lock(?)', [LOCK_KEY]);
    },
    async insert(db: Knex, row: SigningKeyRow): Promise<void> {
      await db('identity_signing_keys').insert({ ...row, public_jwk: JSON.stringify(row.public_jwk) });
    },
    /** The key that signs now (the newest not retired). */
    active(db: Knex = knex): Promise<SigningKeyRow | undefined> {
      return db('identity_signing_keys').whereNull('retired_at').orderBy('created_at', 'desc').first();
    },
    /** Rows whose private key is still stored in plaintext. */
    plaintext(db: Knex): Promise<Array<Pick<SigningKeyRow, 'kid' | 'private_jwk'>>> {
      return db('identity_signing_keys').whereNotNull('private_jwk').select('kid', 'private_jwk');
    },
    /** Stores the sealed private key and clears the plaintext one. */
    async seal(db: Knex, kid: string, sealed: string): Promise<void> {
      await db('identity_signing_keys').where({ kid }).update({ private_jwk_sealed: sealed, private_jwk: null });
    },
    /** Public keys of the signing key and of keys retired after `retiredAfter`, newest first. */
    async publicKeys(retiredAfter: number, db: Knex = knex): Promise<JWK[]> {
      const rows = await db('identity_signing_keys')
        .select('public_jwk', 'created_at')
        .where((q) => q.whereNull('retired_at').orWhere('retired_at', '>', retiredAfter))
        .orderBy('created_at', 'desc');
      return rows.map((r: { public_jwk: JWK }) => r.public_jwk);
    },
    /** Retires every key still signing; returns their kids. */
    async retireActive(db: Knex, now: number): Promise<string[]> {
      const rows = await db('identity_signing_keys').whereNull('retired_at').update({ retired_at: now }).returning('kid');
      return rows.map((r: { kid: string }) => r.kid);
    },
    /** Deletes keys retired at or before `retiredBefore`; returns how many. */
    pruneRetired(db: Knex, retiredBefore: number): Promise<number> {
      return db('identity_signing_keys').where('retired_at', '<=', retiredBefore).delete();
    },
  };
}

export type SigningKeyStore = ReturnType<typeof createSigningKeyStore>;
