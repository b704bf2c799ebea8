import type { Knex } from 'knex';
import { ApiError, type Logger, type Page } from '../../../kit/index.js';
import type { SpendInput, SpendLimitsPort, SpendView } from '../../usage/index.js';
import type { ApiKeys } from '../api-keys/domain.js';
import type { ApiKeyStore } from '../api-keys/store.js';
import type { IdentityProvider } from '../providers/types.js';
import { userView, type IdentityUsersStore, type UserPatch } from '../store.js';
import type { RefreshTokens } from '../tokens/refresh-tokens.js';

/**
 * User administration: list and get users (each with its budget and allow-list); set is_admin,
 * disabled, email_verified and the budget. Disabling revokes at once every API key (deleted, each
 * hash published) and every refresh token of the user. Any change of the three flags publishes
 * `user:<id>`: edge caches drop the validation answers of the user's keys (they carry is_admin) and
 * every process's user directory forgets its cached row, so the next request sees the new role.
 * The last enabled administrator cannot be demoted or disabled (409), even by concurrent requests.
 */
export interface UserAdminPatch {
  is_admin?: boolean;
  disabled?: boolean;
  email_verified?: boolean;
  /** Budget fields given are set, others keep their value. */
  spend?: SpendInput;
}

export function createUserAdmin(deps: {
  /** Where a user's change and its budget commit together. */
  knex: Knex;
  /** The kit's cached user rows: forgotten when a row changes. */
  userCache: { invalidate(userId: string): void };
  /** Budgets and allow-lists of a user, written in the user's own transaction. */
  spend: SpendLimitsPort;
  users: IdentityUsersStore;
  keyStore: ApiKeyStore;
  apiKeys: ApiKeys;
  refreshTokens: RefreshTokens;
  provider: IdentityProvider;
  /** Where a provider change that could not be set back after a failed patch is reported. */
  logger?: Pick<Logger, 'error'>;
}) {
  const { users } = deps;
  return {
    /** A page of users, each with its budget and allow-list (one query for the whole page's). */
    async list(page: Page, filter: { email?: string; isGuest?: boolean; isAdmin?: boolean; disabled?: boolean }) {
      const { rows, total } = await users.list(page, filter);
      const spend = await deps.spend.read(deps.knex, 'user', rows.map((user) => user.id));
      return { rows: rows.map((user) => ({ ...userView(user), ...spend.get(user.id)! })), total };
    },

    /** One user with its budget and allow-list, in the shape `patch` answers. */
    async get(id: string) {
      const [user, spend] = await Promise.all([users.byId(id), deps.spend.read(deps.knex, 'user', [id])]);
      if (!user) throw new ApiError(404, 'User not found', { param: 'id' });
      return { ...userView(user), ...spend.get(id)! };
    },

    /**
     * Sets is_admin, disabled, email_verified and the user's budget fields given, in one
     * transaction (all or nothing); answers the user with its budget and allow-list.
     */
    async patch(actorId: string, id: string, patch: UserAdminPatch) {
      if (id === actorId && (patch.is_admin === false || patch.disabled === true)) {
        throw new ApiError(400, 'Administrators cannot remove their own admin rights or disable themselves', {
          param: patch.disabled === true ? 'disabled' : 'is_admin',
        });
      }
      const removesAdmin = patch.is_admin === false || patch.disabled === true;
      const { user, revokedKeys, spend, changed } = await deps.knex.transaction(async (trx) => {
        // Before the row lock: demotions and disablings are checked one after the other.
        if (removesAdmin) await users.lockAdmins(trx);
        const current = await users.lock(trx, id);
        if (!current) throw new ApiError(404, 'User not found', { param: 'id' });
        if (removesAdmin && current.is_admin && !current.disabled && (await users.otherActiveAdmins(trx, id)) === 0) {
          throw new ApiError(409, 'This is the last enabled administrator: make another user an administrator first', {
            param: patch.disabled === true ? 'disabled' : 'is_admin',
          });
        }
        const change: UserPatch = {};
        if (patch.is_admin !== undefined) change.is_admin = patch.is_admin;
        if (patch.disabled !== undefined) change.disabled = patch.disabled;
        // An administrator vouches for the address: the edge then applies the user tier.
        if (patch.email_verified !== undefined) change.email_verified = patch.email_verified;
        // Only a budget to change: the row itself (and its updated_at) stays as it is.
        const updated = Object.keys(change).length > 0 ? await users.update(trx, id, change) : current;
        let revokedKeys: Awaited<ReturnType<ApiKeyStore['deleteAllOf']>> = [];
        if (patch.disabled === true && !current.disabled) {
          revokedKeys = await deps.keyStore.deleteAllOf(trx, id);
          await deps.refreshTokens.revokeUser(trx, id);
        }
        // The provider's side (an identity provider such as Keycloak: network calls) before the
        // budget: a new budget period seeds its spend counter, and every chat request of the user
        // waits for that row until this transaction ends. Still inside the transaction: if the
        // provider refuses, nothing here changes either.
        const standingChanges = patch.disabled !== undefined && patch.disabled !== current.disabled;
        let spend: SpendView;
        try {
          if (standingChanges) await deps.provider.setEnabled(current, !patch.disabled);
          spend = await deps.spend.apply(trx, 'user', id, patch.spend ?? {});
        } catch (error) {
          // Set back here, with the user's row still locked: after the rollback a concurrent PATCH
          // of the same user could set the provider and commit first, and a late set-back would
          // then undo that one's change instead. Also after a provider call that failed, since it
          // may have half applied (the update went through, its answer or the logout did not):
          // writing the standing the user had is harmless when nothing changed.
          if (standingChanges) {
            await deps.provider.setEnabled(current, !current.disabled).catch((undoError: unknown) =>
              deps.logger?.error({ err: (undoError as Error).message, user_id: id }, 'user change rolled back, but its provider side may not have been set back'),
            );
          }
          throw error;
        }
        const changed =
          (change.is_admin !== undefined && change.is_admin !== current.is_admin) ||
          (change.disabled !== undefined && change.disabled !== current.disabled) ||
          (change.email_verified !== undefined && change.email_verified !== current.email_verified);
        // Only the commit is left: a commit that failed may still have gone through, so the
        // provider's side is not set back then.
        return { user: updated!, revokedKeys, spend, changed };
      });
      deps.userCache.invalidate(id);
      deps.spend.changed('user', id);
      if (patch.disabled === true) await deps.apiKeys.revokeAllOf(revokedKeys, id);
      else if (changed) await deps.apiKeys.userChanged(id);
      return { ...userView(user), ...spend };
    },
  };
}

export type UserAdmin = ReturnType<typeof createUserAdmin>;
