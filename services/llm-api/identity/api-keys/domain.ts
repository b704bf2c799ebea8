import type { Knex } from 'knex';
import {
  ApiError,
  newId,
  randomBase62,
  safeEqual,
  sha256Hex,
  userRevocation,
  type Clock,
  type Logger,
  type Page,
  type Principal,
  type RevocationChannel,
} from '../../../kit/index.js';
import type { SpendInput, SpendLimitsPort } from '../../usage/index.js';
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
  /** Where key changes and their budgets commit together. */
  knex: Knex;
  clock: Clock;
  logger: Pick<Logger, 'error' | 'warn'>;
  /** Edge caches hear of every revoked key hash here. */
  revocations: Pick<RevocationChannel, 'publish'>;
  /** The kit's cached user rows (the bootstrap admin's row changes). */
  userCache: { invalidate(userId: string): void };
  store: ApiKeyStore;
  users: IdentityUsersStore;
  provider: IdentityProvider;
  /** Budgets and allow-lists of a key, written in the key's own transaction. */
  spend: SpendLimitsPort;
  maxPerUser: number;
  /** API_KEY_DEFAULT_TIER: the tier of a key created without one. */
  defaultTier: Tier;
  /** API_KEY_MAX_TTL_DAYS: upper bound of `expiresInDays`. */
  maxTtlDays: number;
}

export interface NewKeyInput {
  name?: string;
  tier?: Tier;
  limits?: Partial<Limits> | null;
  expiresInDays?: number;
  /** The key's budget and allow-list (absent fields: none). */
  spend?: SpendInput;
}

export interface KeyPatch {
  tier?: Tier;
  limits?: Partial<Limits> | null;
  /** Budget fields given are set, others keep their value. */
  spend?: SpendInput;
}

/** API keys are managed with a bearer token: a key cannot mint, list or delete keys. */
export function bearerOnly(principal: Principal): Principal {
  if (principal.authMethod !== 'jwt') throw new ApiError(403, 'API keys are managed with a bearer token, not with an API key', { param: 'Authorization' });
  return principal;
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
  const { knex, clock, store, users, provider } = deps;

  const publish = (message: string) =>
    deps.revocations.publish(message).catch((error) => deps.logger.error({ err: (error as Error).message }, 'revocation publish failed'));

  function checkTtl(days: number | undefined) {
    if (days !== undefined && days > deps.maxTtlDays) {
      throw new ApiError(400, `Invalid value for 'expires_in_days': at most ${deps.maxTtlDays} days.`, { param: 'expires_in_days' });
    }
  }

  /**
   * The key, its budget and the provider's mirror in one transaction: when any part fails, no key
   * exists afterwards (a retry does not leave a duplicate counting against the per-user cap).
   */
  async function insertKey(userId: string, input: NewKeyInput, secret: string = generateApiKey()) {
    checkTtl(input.expiresInDays);
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
    const spend = await knex.transaction(async (trx) => {
      // The user row lock serialises concurrent creations, so the cap holds under races.
      const user = await users.lock(trx, userId);
      if (!user || user.disabled) throw new ApiError(404, 'User not found', { param: 'user_id' });
      const count = await store.countActive(trx, userId, now);
      if (count >= deps.maxPerUser) {
        throw new ApiError(400, `API key limit reached: at most ${deps.maxPerUser} active keys per user`, { code: 'api_key_limit_reached' });
      }
      await store.insert(trx, row);
      const limits = await deps.spend.apply(trx, 'key', row.id, input.spend ?? {});
      // Last: the provider's side is the one step the transaction cannot undo.
      await provider.apiKeyAdded(user, row.key_hash);
      return limits;
    });
    return { ...apiKeyView(row), key: secret, ...spend };
  }

  async function removed(rows: ApiKeyRow[]) {
    for (const row of rows) await publish(row.key_hash);
    // No copy to update: no transaction and no lock of the user row per key (a sweep removes hundreds).
    if (!provider.mirrorsApiKeys) return;
    for (const row of rows) {
      // The provider's mirror is a read-modify-write of the whole list (Keycloak: GET + PUT of the
      // user's attributes). Under the user row's lock, which a key's creation, an upgrade and a
      // disabling take around theirs too, so no two of them interleave (in any process) and lose one.
      await knex
        .transaction(async (trx) => {
          const user = await users.lock(trx, row.user_id);
          if (user) await provider.apiKeyRemoved(user, row.key_hash);
        })
        .catch((error) => deps.logger.warn({ err: (error as Error).message, key: row.id }, 'identity provider did not drop the key hash'));
    }
  }

  /** A page of active keys, each with its budget and allow-list (one query for the whole page's). */
  async function listPage(userId: string | undefined, page: Page) {
    const now = clock.now();
    const [rows, total] = await Promise.all([store.listActive(userId, now, page), store.countAll(userId, now)]);
    const spend = await deps.spend.read(knex, 'key', rows.map((row) => row.id));
    return { rows: rows.map((row) => ({ ...apiKeyView(row), ...spend.get(row.id)! })), total };
  }

  /** Revokes and deletes; another user's key is a 404 (existence is not leaked). */
  async function remove(keyId: string, userId?: string) {
    const row = await store.delete(knex, keyId, userId);
    if (!row) throw new ApiError(404, 'API key not found', { param: 'id' });
    await removed([row]);
    return { id: row.id, object: 'api_key.deleted' as const, deleted: true };
  }

  return {
    defaultTier: deps.defaultTier,

    /**
     * The caller's own key (`POST /auth/api-keys`): with a bearer token, not as a guest; only an
     * administrator may pick a tier other than the default or set custom limits.
     */
    async create(principal: Principal, input: NewKeyInput) {
      bearerOnly(principal);
      if (principal.isGuest) throw new ApiError(403, 'Guest accounts cannot create API keys; upgrade the account first');
      if (!principal.isAdmin && input.tier !== undefined && input.tier !== deps.defaultTier) {
        throw new ApiError(403, `Only an administrator may choose a key's tier; your keys get the '${deps.defaultTier}' tier`, { param: 'tier' });
      }
      if (!principal.isAdmin && input.limits != null) throw new ApiError(403, 'Only an administrator may set custom limits', { param: 'limits' });
      return insertKey(principal.userId, input);
    },

    /** An administrator's key for any user (`POST /v1/admin/api-keys`; the route admits administrators only). */
    createFor: (userId: string, input: NewKeyInput) => insertKey(userId, input),

    /** The caller's active keys, paged (bearer token only). */
    listOwn: (principal: Principal, page: Page) => listPage(bearerOnly(principal).userId, page),

    /** Active keys, paged: one user's or every user's (admin listing). */
    listPage,

    /** The caller deletes one of its keys (bearer token only); another user's key is a 404. */
    removeOwn: (principal: Principal, keyId: string) => remove(keyId, bearerOnly(principal).userId),

    /** Revokes and deletes any user's key (admin). */
    remove: (keyId: string) => remove(keyId),

    /**
     * An administrator's change of tier, limits, budget or allow-list: one transaction. Edge caches
     * hold the old tier, so the key's hash is published (after the commit).
     */
    async update(keyId: string, patch: KeyPatch) {
      const { row, spend } = await knex.transaction(async (trx) => {
        const row = await store.update(trx, keyId, { tier: patch.tier, limits: patch.limits });
        if (!row) throw new ApiError(404, 'API key not found', { param: 'id' });
        return { row, spend: await deps.spend.apply(trx, 'key', row.id, patch.spend ?? {}) };
      });
      deps.spend.changed('key', row.id);
      await publish(row.key_hash);
      return { ...apiKeyView(row), ...spend };
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
      // A user deleted or disabled at the identity provider alone (Keycloak's console) is refused
      // here as well; the provider's answer is cached, so this is rarely more than a map lookup.
      if ((await provider.standing(row)) === 'disabled') throw new ApiError(401, 'Invalid API key', { param: 'api_key' });
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
        // Only what an administrator set on the key (null: nothing): the edge holds the key to these
        // in place of its tier's, and keeps following its own tier settings for the rest.
        custom_limits: row.limits,
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
     * A user's role or standing changed (is_admin, disabled, email_verified), after the commit:
     * `user:<id>` is published, so edge caches drop the validation answers they hold for the
     * user's keys (an answer carries is_admin, which exempts a key from the per-address limit)
     * and every process's user directory forgets the row.
     */
    userChanged: (userId: string) => publish(userRevocation(userId)),

    /**
     * BOOTSTRAP_ADMIN_API_KEY: makes sure an admin user holds this key (enterprise tier, no limits).
     * Idempotent across restarts and concurrent starts.
     */
    async ensureBootstrapAdmin(secret: string): Promise<{ userId: string; created: boolean }> {
      const hash = sha256Hex(secret);
      const ready = await knex.transaction(async (trx) => {
        await store.lockBootstrapAdmin(trx);
        const existing = await store.byHash(hash, trx);
        if (existing) {
          const before = await users.lock(trx, existing.user_id);
          const user = await users.update(trx, existing.user_id, { is_admin: true, disabled: false });
          await store.update(trx, existing.id, { tier: 'enterprise', limits: null });
          if (existing.expires_at !== null) await store.clearExpiry(trx, existing.id);
          const restored = !before?.is_admin || before.disabled || existing.tier !== 'enterprise' || existing.limits !== null || existing.expires_at !== null;
          return { userId: user!.id, created: false, restored };
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
        return { userId, created: true, restored: false };
      });
      if (!ready.created) deps.userCache.invalidate(ready.userId);
      // A demoted, disabled or re-tiered bootstrap admin: edge caches drop what they hold for its keys.
      if (ready.restored) await publish(userRevocation(ready.userId));
      return { userId: ready.userId, created: ready.created };
    },
  };
}

export type ApiKeys = ReturnType<typeof createApiKeys>;
