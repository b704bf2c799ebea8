import {
  ApiError,
  newId,
  randomBase62,
  safeEqual,
  sha256Hex,
  userRevocation,
  type Page,
  type Runtime,
} from '../../../kit/index.js';
import type { IdentityProvider } from '../providers/types.js';
import type { IdentityUsersStore } from '../store.js';
import type { ApiKeyRow, ApiKeyStore } from './store.js';
import { effectiveLimits, type Limits, type Tier } from './tiers.js';

/**
 * API keys: `sk_` + 32 base62 characters from a cryptographic source; only the SHA-256 hash is
 * stored. Every revocation (deleted, expired, user disabled, tier changed) is published on the
 * revocation channel so edge caches drop it at once.
 */
export const API_KEY_PATTERN = /^sk_[0-9A-Za-z]{32}$/;
const DAY_MS = 24 * 3600 * 1000;
const TOUCH_EVERY_MS = 60 * 1000;
/** Compared against when no row matched, so a miss costs the same comparison as a hit. */
const ABSENT_HASH = sha256Hex('identity:absent-api-key');

export interface ApiKeyDeps {
  runtime: Runtime;
  store: ApiKeyStore;
  users: IdentityUsersStore;
  provider: IdentityProvider;
  maxPerUser: number;
  /** API_KEY_DEFAULT_TIER: the tier of a key created without one. */
  defaultTier: Tier;
}

export interface NewKeyInput {
  name?: string;
  tier?: Tier;
  limits?: Partial<Limits> | null;
  expiresInDays?: number;
}

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The record of a key as list and create return it: never the secret, never the hash. */
export function apiKeyView(row: ApiKeyRow) {
  return {
    id: row.id,
    object: 'api_key' as const,
    name: row.name,
    prefix: row.prefix,
    last_four: row.last_four,
    tier: row.tier,
    limits: row.limits,
    created_at: seconds(row.created_at),
    last_used_at: seconds(row.last_used_at),
    expires_at: seconds(row.expires_at),
  };
}

export function generateApiKey(): string {
  return `sk_${randomBase62(32)}`;
}

export function createApiKeys(deps: ApiKeyDeps) {
  const { runtime, store, users, provider } = deps;
  const clock = runtime.clock;

  const publish = (message: string) =>
    runtime.revocations.publish(message).catch((error) => runtime.logger.error({ err: (error as Error).message }, 'revocation publish failed'));

  async function insertKey(userId: string, input: NewKeyInput, secret: string = generateApiKey()) {
    const now = clock.now();
    const row: ApiKeyRow = {
      id: newId('apiKey'),
      user_id: userId,
      // A key created without a name (an empty POST) is named after its creation date.
      name: input.name ?? `API key created ${new Date(now).toISOString().slice(0, 10)}`,
      key_hash: sha256Hex(secret),
      prefix: secret.slice(0, 7),
      last_four: secret.slice(-4),
      tier: input.tier ?? deps.defaultTier,
      limits: input.limits ?? null,
      created_at: now,
      last_used_at: null,
      expires_at: input.expiresInDays ? now + input.expiresInDays * DAY_MS : null,
    };
    await store.knex.transaction(async (trx) => {
      // The user row lock serialises concurrent creations, so the cap holds under races.
      const user = await users.lock(trx, userId);
      if (!user || user.disabled) throw new ApiError(404, 'User not found', { param: 'user_id' });
      const count = await store.countActive(trx, userId, now);
      if (count >= deps.maxPerUser) {
        throw new ApiError(400, `API key limit reached: at most ${deps.maxPerUser} active keys per user`, { code: 'api_key_limit_reached' });
      }
      await store.insert(trx, row);
      await provider.apiKeyAdded(user, row.key_hash);
    });
    return { ...apiKeyView(row), key: secret };
  }

  async function removed(rows: ApiKeyRow[]) {
    for (const row of rows) await publish(row.key_hash);
    for (const row of rows) {
      const user = await users.byId(row.user_id);
      if (user) await provider.apiKeyRemoved(user, row.key_hash).catch((error) =>
        runtime.logger.warn({ err: (error as Error).message, key: row.id }, 'identity provider did not drop the key hash'));
    }
  }

  return {
    defaultTier: deps.defaultTier,
    create: (userId: string, input: NewKeyInput) => insertKey(userId, input),

    /** Active keys, paged: one user's (`/auth/api-keys`) or every user's (admin listing). */
    async listPage(userId: string | undefined, page: Page) {
      const now = clock.now();
      const [rows, total] = await Promise.all([store.listActive(userId, now, page), store.countAll(userId, now)]);
      return { rows: rows.map(apiKeyView), total };
    },

    /** Revokes and deletes; another user's key is a 404 (existence is not leaked). */
    async remove(keyId: string, userId?: string) {
      const row = await store.delete(store.knex, keyId, userId);
      if (!row) throw new ApiError(404, 'API key not found', { param: 'id' });
      await removed([row]);
      return { id: row.id, object: 'api_key.deleted' as const, deleted: true };
    },

    async update(keyId: string, patch: { tier?: Tier; limits?: Partial<Limits> | null }) {
      const row = await store.update(store.knex, keyId, patch);
      if (!row) throw new ApiError(404, 'API key not found', { param: 'id' });
      // Edge caches hold the old tier: make them validate again.
      await publish(row.key_hash);
      return apiKeyView(row);
    },

    /**
     * Validation for the edge. Unknown, deleted, expired keys and keys of disabled users go through
     * the same statements and comparisons and all end in the same 401: the answer time does not
     * tell them apart. Work that only a valid key needs (last_used_at) happens after the answer;
     * expired keys are deleted and their revocation published by the periodic sweep.
     */
    async validate(rawKey: string) {
      const hash = sha256Hex(rawKey);
      const row = await store.forValidation(hash);
      const now = clock.now();
      const hashMatches = safeEqual(row?.key_hash ?? ABSENT_HASH, hash);
      const notExpired = row?.expires_at === null || (row?.expires_at ?? 0) > now;
      const userActive = row?.disabled === false;
      // Non-short-circuit AND: every condition is evaluated whatever the outcome.
      const valid = Number(hashMatches) & Number(notExpired) & Number(userActive) & Number(API_KEY_PATTERN.test(rawKey));
      if (!valid || !row) {
        throw new ApiError(401, 'Invalid API key', { param: 'api_key' });
      }
      setImmediate(() => void store.touch(row.id, now, now - TOUCH_EVERY_MS).catch(() => {}));
      return {
        user_id: row.user_id,
        subject: row.subject,
        email: row.email,
        username: row.username,
        is_admin: row.is_admin,
        key_id: row.id,
        tier: row.tier,
        limits: effectiveLimits(row.tier, row.limits),
        expires_at: seconds(row.expires_at),
      };
    },

    /** Deletes keys whose expiry passed and publishes their revocation; returns how many. */
    async sweepExpired(max = 500): Promise<number> {
      const rows = await store.deleteExpired(clock.now(), max);
      await removed(rows);
      return rows.length;
    },

    /** Disabling a user: every key deleted, each hash and `user:<id>` published. */
    async revokeAllOf(trxKeys: ApiKeyRow[], userId: string) {
      await removed(trxKeys);
      await publish(userRevocation(userId));
    },

    /**
     * BOOTSTRAP_ADMIN_API_KEY: makes sure an admin user holds this key (enterprise tier, no limits).
     * Idempotent across restarts and concurrent starts.
     */
    async ensureBootstrapAdmin(secret: string): Promise<{ userId: string; created: boolean }> {
      const hash = sha256Hex(secret);
      return store.knex.transaction(async (trx) => {
        await trx.raw('select pg_advisory_xact_lock(hashtext(?))', ['identity:bootstrap-admin']);
        const existing = await store.byHash(hash, trx);
        if (existing) {
          const user = await users.update(trx, existing.user_id, { is_admin: true, disabled: false });
          await store.update(trx, existing.id, { tier: 'enterprise', limits: null });
          runtime.users.invalidate(existing.user_id);
          if (existing.expires_at !== null) await trx('identity_api_keys').where({ id: existing.id }).update({ expires_at: null });
          return { userId: user!.id, created: false };
        }
        const userId = newId('user');
        await users.insert(trx, {
          id: userId,
          issuer: 'platform',
          subject: userId,
          email: null,
          username: 'bootstrap-admin',
          is_guest: false,
          is_admin: true,
        });
        const now = clock.now();
        await store.insert(trx, {
          id: newId('apiKey'),
          user_id: userId,
          name: 'bootstrap admin key',
          key_hash: hash,
          prefix: secret.slice(0, 7),
          last_four: secret.slice(-4),
          tier: 'enterprise',
          limits: null,
          created_at: now,
          last_used_at: null,
          expires_at: null,
        });
        return { userId, created: true };
      });
    },
  };
}

export type ApiKeys = ReturnType<typeof createApiKeys>;
