import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { ApiError, randomBase62, sha256Hex, type Clock } from '../../../kit/index.js';
import type { RefreshStore } from './refresh-store.js';

/**
 * Opaque refresh tokens: `rt_` + 48 base62 characters, stored only as SHA-256 hashes, single use.
 * Each use rotates the token within its family (one login). Presenting a token that was already
 * used means it was copied: the whole family is revoked (theft detection) and the answer is 401.
 * A family ends REFRESH_FAMILY_MAX_DAYS after the login, however often it is rotated.
 */
export const REFRESH_TOKEN_PATTERN = /^rt_[0-9A-Za-z]{48}$/;
const DAY_MS = 24 * 3600 * 1000;

export interface RefreshSettings {
  ttlDays: number;
  familyMaxDays: number;
}

export interface IssuedRefresh {
  token: string;
  expiresIn: number; // seconds
}

const invalid = () => new ApiError(401, 'Invalid or expired refresh token', { param: 'refresh_token' });

export function createRefreshTokens(options: { store: RefreshStore; clock: Clock; settings: RefreshSettings }) {
  const { store, clock, settings } = options;

  async function issue(db: Knex, userId: string, family?: { id: string; expiresAt: number }): Promise<IssuedRefresh> {
    const now = clock.now();
    const familyExpiresAt = family?.expiresAt ?? now + settings.familyMaxDays * DAY_MS;
    const expiresAt = Math.min(now + settings.ttlDays * DAY_MS, familyExpiresAt);
    const token = `rt_${randomBase62(48)}`;
    await store.insert(db, {
      token_hash: sha256Hex(token),
      family_id: family?.id ?? randomUUID(),
      user_id: userId,
      created_at: now,
      expires_at: expiresAt,
      family_expires_at: familyExpiresAt,
    });
    return { token, expiresIn: Math.max(0, Math.floor((expiresAt - now) / 1000)) };
  }

  return {
    /** Starts a new family (a login). */
    start(db: Knex, userId: string): Promise<IssuedRefresh> {
      return issue(db, userId);
    },

    /**
     * Starts a new family for a user who proved who they are a moment ago (password sign-in), or
     * null when `stillValid` says that proof no longer holds. The user row is held shared, as a
     * rotation holds it, while `stillValid` reads it and the family is stored: a user-wide
     * revocation (disable, password change, reset) that came first is seen by `stillValid`, and one
     * that comes after revokes the new family with the rest. Without it, a sign-in whose password
     * was checked just before a password change or reset got a session the change never ended.
     */
    async startIf(userId: string, stillValid: (trx: Knex) => Promise<boolean>): Promise<IssuedRefresh | null> {
      return store.knex.transaction(async (trx) => {
        await store.shareUser(trx, userId);
        if (!(await stillValid(trx))) return null;
        return issue(trx, userId);
      });
    },

    /**
     * Consumes `token` and returns the user it belongs to plus its successor. `isUserActive` is
     * checked inside the same transaction (a disabled user cannot refresh).
     */
    async rotate(token: string, isUserActive: (trx: Knex, userId: string) => Promise<boolean>): Promise<{ userId: string; next: IssuedRefresh }> {
      if (!REFRESH_TOKEN_PATTERN.test(token)) throw invalid();
      const hash = sha256Hex(token);
      // Reuse is detected in its own transaction so the family revocation commits even though we answer 401.
      const outcome = await store.knex.transaction(async (trx) => {
        const now = clock.now();
        // The user row before the token's, as a user-wide revocation (disable, password change or
        // reset) locks them: one waits for the other, and a successor issued here is revoked with the rest.
        const owner = await store.ownerOf(trx, hash);
        if (owner === undefined) return { error: true as const };
        await store.shareUser(trx, owner);
        const row = await store.byHash(trx, hash);
        if (!row || row.revoked_at !== null) return { error: true as const };
        if (row.used_at !== null) {
          await store.revokeFamily(trx, row.family_id, now);
          return { error: true as const, reuse: true };
        }
        if (row.expires_at <= now || row.family_expires_at <= now) return { error: true as const };
        if (!(await isUserActive(trx, row.user_id))) return { error: true as const };
        if ((await store.markUsed(trx, row.id, now)) !== 1) {
          await store.revokeFamily(trx, row.family_id, now);
          return { error: true as const, reuse: true };
        }
        const next = await issue(trx, row.user_id, { id: row.family_id, expiresAt: row.family_expires_at });
        return { error: false as const, userId: row.user_id, next };
      });
      if (outcome.error) throw invalid();
      return { userId: outcome.userId, next: outcome.next };
    },

    /**
     * Sign-out: ends the family (the login) `token` belongs to, whether it is the current token or
     * one already rotated, so no token of that session refreshes again. An unknown token is ignored
     * (as RFC 7009 answers it: nothing tells a caller which tokens exist). The user row is locked
     * first, as a user-wide revocation locks it: a rotation of the same session running meanwhile
     * (it holds the row shared) commits its successor before the family is revoked, so the successor
     * is revoked with it. Without the lock, a revocation whose statement began before the successor
     * was committed would miss it, and the signed-out session would go on refreshing.
     */
    async revoke(token: string): Promise<void> {
      if (!REFRESH_TOKEN_PATTERN.test(token)) return;
      const hash = sha256Hex(token);
      await store.knex.transaction(async (trx) => {
        const owner = await store.ownerOf(trx, hash);
        if (owner === undefined) return;
        await store.lockUser(trx, owner);
        const row = await store.byHash(trx, hash);
        if (row) await store.revokeFamily(trx, row.family_id, clock.now());
      });
    },

    /** Deletes tokens of families that have ended (kept until then for reuse detection). */
    prune(): Promise<number> {
      return store.prune(store.knex, clock.now());
    },

    revokeUser(db: Knex, userId: string): Promise<number> {
      return store.revokeUser(db, userId, clock.now());
    },
  };
}

export type RefreshTokens = ReturnType<typeof createRefreshTokens>;
