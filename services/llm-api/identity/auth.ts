import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { ApiError, newId, randomBase62 } from '../../kit/index.js';
import type { Passwords } from './passwords/domain.js';
import type { IdentityProvider, TokenSet } from './providers/types.js';
import { userView, type IdentityUsersStore, type UserRecord } from './store.js';

/** Guest login, refresh and upgrade (SPEC.md 3 and 4.1), over whichever provider is configured. */
export interface AuthDeps {
  knex: Knex;
  /** The kit's cached user rows: forgotten when an upgrade changes one. */
  userCache: { invalidate(userId: string): void };
  provider: IdentityProvider;
  users: IdentityUsersStore;
  passwords: Passwords;
  guestEmailDomain: string;
  /** UPGRADE_VERIFIES_EMAIL: whether an upgrade marks the new e-mail verified. */
  upgradeVerifiesEmail: boolean;
}

export interface LoginResult extends TokenSet {
  user_id: string;
  username: string | null;
}

export function createAuth(deps: AuthDeps) {
  const { knex, provider, users } = deps;

  return {
    async guestLogin(): Promise<LoginResult> {
      const userId = newId('user');
      const profile = {
        userId,
        email: `guest-${randomUUID()}@${deps.guestEmailDomain}`,
        username: `guest_${randomBase62(12).toLowerCase()}`,
      };
      const account = await provider.createGuest(profile);
      let user: UserRecord;
      try {
        user = await users.insert(knex, {
          id: userId,
          issuer: account.issuer,
          subject: account.subject,
          email: profile.email,
          username: profile.username,
          is_guest: true,
        });
      } catch (error) {
        // The provider's account exists already (Keycloak): without the platform's row nothing can
        // ever use or remove it, so it goes too.
        await account.discard();
        throw error;
      }
      // Outside any transaction: signing may read the key table (PGlite has a single connection).
      const tokens = await account.tokens(knex, user);
      return { ...tokens, user_id: userId, username: profile.username };
    },

    async refresh(refreshToken: string): Promise<LoginResult> {
      const { userId, tokens } = await deps.provider.refresh(refreshToken);
      const user = await users.byId(userId);
      return { ...tokens, user_id: userId, username: user?.username ?? null };
    },

    /** Sign-out: the refresh token's session ends (its access tokens run out on their own, within minutes). */
    async logout(refreshToken: string): Promise<{ revoked: true }> {
      await deps.provider.revokeRefresh(refreshToken);
      return { revoked: true };
    },

    /**
     * Guest → permanent account: the temporary e-mail is replaced by the real one, the guest flag
     * cleared, and with `password` (embedded issuer) a password set for sign-in. Nobody proved the
     * address, so by default it stays unverified (the edge keeps such accounts on a lower tier)
     * until an administrator or a verified sign-in (an external issuer's `email_verified`) marks it;
     * UPGRADE_VERIFIES_EMAIL=true marks it at once. A non-guest caller is a 400; a taken e-mail or
     * username 409.
     */
    async upgrade(userId: string, change: { email: string; username?: string; fullName?: string; password?: string }) {
      // Hashed before the transaction: scrypt takes a while and must not hold the row locks.
      const passwordHash = change.password === undefined ? undefined : await deps.passwords.hashNew(change.password, 'password');
      const user = await knex.transaction(async (trx) => {
        // In one order whatever the field (a username may look like an e-mail): two upgrades
        // claiming each other's e-mail as username must not each hold the lock the other waits for.
        const names = [change.email, change.username].flatMap((name) => (name ? [name.toLowerCase()] : []));
        for (const name of [...new Set(names)].sort()) await users.lockName(trx, name);
        const current = await users.lock(trx, userId);
        if (!current) throw new ApiError(401, 'Unknown or disabled user');
        if (!current.is_guest) throw new ApiError(400, 'Only a guest account can be upgraded', { param: 'email', code: 'not_a_guest' });
        if (await users.taken(trx, 'email', change.email, userId)) throw new ApiError(409, 'This e-mail is already registered', { param: 'email' });
        if (change.username && (await users.taken(trx, 'username', change.username, userId))) {
          throw new ApiError(409, 'This username is already taken', { param: 'username' });
        }
        // The provider is updated inside the transaction: if it refuses, nothing changes here either.
        await provider.upgrade(current, {
          email: change.email,
          username: change.username,
          fullName: change.fullName,
          emailVerified: deps.upgradeVerifiesEmail,
        });
        if (passwordHash !== undefined) await deps.passwords.save(trx, userId, passwordHash);
        return users.update(trx, userId, {
          email: change.email,
          email_verified: deps.upgradeVerifiesEmail,
          is_guest: false,
          ...(change.username ? { username: change.username } : {}),
          ...(change.fullName !== undefined ? { full_name: change.fullName } : {}),
        });
      });
      deps.userCache.invalidate(userId);
      return userView(user as UserRecord);
    },

    async me(userId: string) {
      const user = await users.byId(userId);
      if (!user) throw new ApiError(401, 'Unknown or disabled user');
      return userView(user);
    },
  };
}

export type Auth = ReturnType<typeof createAuth>;
