import { randomUUID } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import type { Knex } from 'knex';
import type { Clock, SecretBox } from '../../../kit/index.js';
import { createSigningKeyStore, type SigningAlg, type SigningKeyRow as KeyRow } from './signing-keys-store.js';

export type { SigningAlg } from './signing-keys-store.js';

/**
 * The embedded issuer's signing keys, kept in the database so every llm-api process signs with
 * the same key and a restart keeps tokens valid. The private half is stored sealed with the
 * secret box under MASTER_KEY (bound to its kid), so a database dump alone cannot mint tokens. One key signs (retired_at null); retired keys
 * stay in the JWKS until every token they signed has expired, then they are pruned.
 */
export interface ActiveKey {
  kid: string;
  alg: SigningAlg;
  privateKey: CryptoKey;
}

/** Longest an access token may live (the edge refuses longer), plus slack for clock skew and caches. */
export const MAX_TOKEN_LIFETIME_MS = 3600 * 1000;
const RETENTION_SLACK_MS = 5 * 60 * 1000;
/** How long a process keeps using its cached signing key before re-reading (another process may have rotated). */
const RELOAD_MS = 60 * 1000;

export function createKeyRing(options: { knex: Knex; clock: Clock; alg: SigningAlg; box: SecretBox }) {
  const { knex, clock, box } = options;
  const store = createSigningKeyStore(knex);
  let cached: { key: ActiveKey; loadedAt: number } | null = null;

  async function generate(trx: Knex, alg: SigningAlg): Promise<KeyRow> {
    const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
    const publicJwk = await exportJWK(publicKey);
    const kid = `${(await calculateJwkThumbprint(publicJwk)).slice(0, 16)}-${randomUUID().slice(0, 8)}`;
    const privateJwk: JWK = { ...(await exportJWK(privateKey)), kid, alg };
    const row: KeyRow = {
      kid,
      alg,
      public_jwk: { ...publicJwk, kid, alg, use: 'sig' },
      private_jwk: null,
      private_jwk_sealed: box.seal(JSON.stringify(privateJwk), kid),
      created_at: clock.now(),
      retired_at: null,
    };
    await store.insert(trx, row);
    return row;
  }

  function privateJwkOf(row: KeyRow): JWK {
    if (row.private_jwk_sealed) return JSON.parse(box.open(row.private_jwk_sealed, row.kid)) as JWK;
    if (row.private_jwk) return row.private_jwk; // a row not sealed yet (sealed at the next start)
    throw new Error(`signing key ${row.kid} has no private key`);
  }

  async function toActive(row: KeyRow): Promise<ActiveKey> {
    return { kid: row.kid, alg: row.alg, privateKey: (await importJWK(privateJwkOf(row), row.alg)) as CryptoKey };
  }

  /** Seals every private key still stored in plaintext (rows from before sealing) and clears the plaintext. */
  async function sealPlaintextKeys(trx: Knex): Promise<number> {
    const rows = await store.plaintext(trx);
    for (const row of rows) await store.seal(trx, row.kid, box.seal(JSON.stringify(row.private_jwk), row.kid));
    return rows.length;
  }

  return {
    /**
     * At start: seals plaintext private keys left by older versions, and makes sure a signing key
     * exists (first start); safe when several processes start at once. Returns how many were sealed.
     */
    async ensureKey(): Promise<number> {
      return knex.transaction(async (trx) => {
        await store.lock(trx);
        const sealed = await sealPlaintextKeys(trx);
        if (!(await store.active(trx))) await generate(trx, options.alg);
        return sealed;
      });
    },

    async signingKey(): Promise<ActiveKey> {
      const now = clock.now();
      if (cached && now - cached.loadedAt < RELOAD_MS && now >= cached.loadedAt) return cached.key;
      let row = await store.active();
      if (!row) {
        await this.ensureKey();
        row = await store.active();
      }
      if (!row) throw new Error('no signing key');
      const previous = cached;
      const key = previous && previous.key.kid === row.kid ? previous.key : await toActive(row);
      cached = { key, loadedAt: now };
      return key;
    },

    /** Public keys that may still have valid tokens: the signing key and recently retired ones. */
    async publicKeys(): Promise<JWK[]> {
      const cutoff = clock.now() - MAX_TOKEN_LIFETIME_MS - RETENTION_SLACK_MS;
      return store.publicKeys(cutoff);
    },

    /**
     * Key rotation: a new key signs from now on; the old one is retired but stays published until
     * its last token has expired; keys retired before that window are deleted.
     */
    async rotate(alg: SigningAlg = options.alg): Promise<{ kid: string; retired: string[]; pruned: number }> {
      const result = await knex.transaction(async (trx) => {
        await store.lock(trx);
        const now = clock.now();
        const retired = await store.retireActive(trx, now);
        const created = await generate(trx, alg);
        const pruned = await store.pruneRetired(trx, now - MAX_TOKEN_LIFETIME_MS - RETENTION_SLACK_MS);
        return { kid: created.kid, retired, pruned };
      });
      cached = null;
      return result;
    },
  };
}

export type KeyRing = ReturnType<typeof createKeyRing>;
