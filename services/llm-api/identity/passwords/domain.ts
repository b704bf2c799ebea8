import type { Knex } from 'knex';
import { ApiError, randomBase62, sha256Hex, type Clock, type Logger } from '../../../kit/index.js';
import type { IdentityProvider, TokenSet } from '../providers/types.js';
import type { IdentityUsersStore } from '../store.js';
import type { RefreshTokens } from '../tokens/refresh-tokens.js';
import { decoyHash, hashPassword, verifyPassword } from './hashing.js';
import type { LoginAttempts, PasswordStore } from './store.js';

/** Longest password accepted (scrypt takes any length; this only bounds the work one request asks for). */
export const MAX_PASSWORD_LENGTH = 1024;

export interface PasswordSettings {
  /** PASSWORD_MIN_LENGTH: new passwords (upgrade, change) shorter than this are a 400. */
  minLength: number;
  /** LOGIN_MAX_FAILURES: failed attempts in a row that lock an address. */
  maxFailures: number;
  /** LOGIN_LOCKOUT_SECONDS: how long the lock lasts, and how long a failure is remembered. */
  lockoutSeconds: number;
  /** With an external provider: where its users sign in (named in the 400 of the password endpoints). */
  externalSignInUrl: string;
}

export interface PasswordDeps {
  store: PasswordStore;
  users: IdentityUsersStore;
  provider: IdentityProvider;
  refreshTokens: RefreshTokens;
  clock: Clock;
  logger: Logger;
  settings: PasswordSettings;
}

export interface SignedIn extends TokenSet {
  user_id: string;
  username: string | null;
}

const GENERIC_FAILURE = 'Invalid e-mail or password';
/** Lockout counters are per address, known or not; the key never reveals the address. */
const emailKey = (email: string) => sha256Hex(`login:${email.trim().toLowerCase()}`);

/**
 * Password sign-in of the embedded issuer: passwords set at upgrade or changed by their owner,
 * sign-in by e-mail and password, a lockout after repeated failures, and the administrator's reset.
 *
 * No user enumeration: an unknown address, an account without a password, a disabled account and a
 * wrong password all run one scrypt check and answer the same 401; failures are counted per address
 * whether anyone holds it or not, so the lockout does not tell them apart either. Passwords are
 * never logged, stored or returned; only the administrator's temporary password is returned, once.
 */
export function createPasswords(deps: PasswordDeps) {
  const { store, users, provider, refreshTokens, clock, settings } = deps;
  const lockoutMs = settings.lockoutSeconds * 1000;

  /** Passwords are the platform's only when the provider says so (the embedded issuer); otherwise a 400 pointing to the provider. */
  function requirePasswordSignIn(): void {
    if (provider.passwordSignIn !== true) {
      throw new ApiError(
        400,
        `Sign-in and passwords are handled by the identity provider (${settings.externalSignInUrl}): sign in there and call the API with its access token`,
        { code: 'external_identity_provider' },
      );
    }
  }

  /** A new password: long enough, not absurdly long. The value never appears in the answer. */
  function checkNew(password: string, param: string): void {
    if (password.length < settings.minLength) {
      throw new ApiError(400, `Invalid value for '${param}': at least ${settings.minLength} characters.`, { param, code: 'password_too_short' });
    }
    if (password.length > MAX_PASSWORD_LENGTH) {
      throw new ApiError(400, `Invalid value for '${param}': at most ${MAX_PASSWORD_LENGTH} characters.`, { param });
    }
  }

  const lockedMs = (state: LoginAttempts | undefined, now: number) => (state?.locked_until != null && state.locked_until > now ? state.locked_until - now : 0);

  function lockedError(ms: number, now: number): ApiError {
    const seconds = Math.max(1, Math.ceil(ms / 1000));
    return new ApiError(
      429,
      `Too many failed sign-in attempts; sign-in for this account is locked until ${new Date(now + ms).toISOString()} (retry in ${seconds} seconds)`,
      { code: 'login_locked', headers: { 'retry-after': String(seconds) } },
    );
  }

  /** Counts a failure; a failure older than the window, or a lock that ended, starts the count again. */
  function nextAttempts(current: LoginAttempts | undefined, now: number): LoginAttempts {
    if (current && lockedMs(current, now) > 0) return { ...current, failures: current.failures + 1 };
    const fresh = !current || current.locked_until !== null || now - current.updated_at > lockoutMs;
    const failures = (fresh ? 0 : current.failures) + 1;
    return { failures, locked_until: failures >= settings.maxFailures ? now + lockoutMs : null, updated_at: now };
  }

  /** Refuses while the address is locked; otherwise checks `password` against `hash` (or the decoy) and counts a failure. */
  async function check(key: string, password: string, hash: string | null | undefined): Promise<{ ok: boolean; lockedFor: number; now: number }> {
    const before = clock.now();
    const wait = lockedMs(await store.attempts(key), before);
    if (wait > 0) throw lockedError(wait, before);
    // Both operands evaluated: the decoy check costs what a real one costs.
    const matches = await verifyPassword(password, hash ?? (await decoyHash()));
    const ok = matches && hash != null;
    const now = clock.now();
    if (ok) {
      await store.clearAttempts(key);
      return { ok, lockedFor: 0, now };
    }
    const state = await store.recordFailure(key, (current) => nextAttempts(current, now));
    return { ok, lockedFor: lockedMs(state, now), now };
  }

  async function session(userId: string): Promise<SignedIn> {
    const user = await users.byId(userId);
    if (!user || user.disabled) throw new ApiError(401, GENERIC_FAILURE, { code: 'invalid_credentials' });
    const tokens = await provider.startSession(user);
    return { ...tokens, user_id: user.id, username: user.username };
  }

  return {
    requirePasswordSignIn,
    checkNew,

    /** A new password's hash, checked first (for upgrade, which stores it inside its own transaction). */
    async hashNew(password: string, param: string): Promise<string> {
      requirePasswordSignIn();
      checkNew(password, param);
      return hashPassword(password);
    },

    save: (db: Knex, userId: string, hash: string) => store.setHash(db, userId, hash, clock.now()),

    /** `POST /auth/login`: the same token pair guest login and refresh give. */
    async login(email: string, password: string): Promise<SignedIn> {
      requirePasswordSignIn();
      const account = await store.accountByEmail(email);
      const usable = account && !account.disabled && !account.is_guest ? account.hash : null;
      const result = await check(emailKey(email), password, usable);
      if (result.lockedFor > 0) throw lockedError(result.lockedFor, result.now);
      if (!result.ok || !account) throw new ApiError(401, GENERIC_FAILURE, { code: 'invalid_credentials' });
      return session(account.user_id);
    },

    /**
     * `POST /auth/password`: the caller changes its password. The current one is required when one
     * is set (wrong → 400, counted toward the lockout like a failed sign-in). Every refresh token of
     * the user is revoked (other sessions end when their access token expires); the answer is a new
     * token pair for the caller.
     */
    async change(userId: string, current: string | undefined, next: string): Promise<SignedIn> {
      requirePasswordSignIn();
      checkNew(next, 'new_password');
      const user = await users.byId(userId);
      if (!user || user.disabled) throw new ApiError(401, 'Unknown or disabled user');
      if (user.is_guest || !user.email) throw new ApiError(400, 'A guest account has no password; upgrade it first (POST /auth/upgrade with a password)', { param: 'new_password' });
      const hash = await store.hashOf(userId);
      if (hash !== undefined) {
        if (current === undefined) throw new ApiError(400, "Missing required parameter: 'current_password'.", { param: 'current_password' });
        const result = await check(emailKey(user.email), current, hash);
        if (result.lockedFor > 0) throw lockedError(result.lockedFor, result.now);
        if (!result.ok) throw new ApiError(400, 'The current password is wrong', { param: 'current_password', code: 'invalid_password' });
      }
      const newHash = await hashPassword(next);
      await store.knex.transaction(async (trx) => {
        await store.setHash(trx, userId, newHash, clock.now());
        await refreshTokens.revokeUser(trx, userId);
      });
      deps.logger.info({ userId }, 'password changed');
      return session(userId);
    },

    /**
     * `POST /v1/admin/users/{id}/reset-login`: for a user who forgot the password or got locked
     * out. Clears the lockout, replaces the password by a random temporary one returned once (the
     * administrator hands it over; the user signs in with it and changes it), and revokes every
     * refresh token of the user.
     */
    async resetLogin(userId: string) {
      requirePasswordSignIn();
      const user = await users.byId(userId);
      if (!user) throw new ApiError(404, 'User not found', { param: 'id' });
      if (user.is_guest || !user.email) {
        throw new ApiError(400, 'This user has no e-mail address to sign in with (a guest or a key-only account)', { param: 'id', code: 'no_sign_in' });
      }
      const temporary = randomBase62(Math.max(24, settings.minLength));
      const hash = await hashPassword(temporary);
      const revoked = await store.knex.transaction(async (trx) => {
        await store.setHash(trx, userId, hash, clock.now());
        await store.clearAttempts(emailKey(user.email!), trx);
        return refreshTokens.revokeUser(trx, userId);
      });
      deps.logger.info({ userId }, 'sign-in reset by an administrator');
      return { object: 'user.login_reset' as const, user_id: userId, temporary_password: temporary, sessions_revoked: revoked };
    },

    /** Forgets failure counters that no longer lock anything. */
    prune: () => store.prune(clock.now(), lockoutMs),
  };
}

export type Passwords = ReturnType<typeof createPasswords>;
