import type { Knex } from 'knex';
import { ApiError, randomBase62, sha256Hex, type Clock, type Logger } from '../../../kit/index.js';
import type { IdentityProvider, TokenSet } from '../providers/types.js';
import type { IdentityUsersStore } from '../store.js';
import type { RefreshTokens } from '../tokens/refresh-tokens.js';
import { decoyHash, hashPassword, verifyPassword } from './hashing.js';
import type { AttemptsChange, LoginAttempts, PasswordStore } from './store.js';

/** Longest password accepted (scrypt takes any length; this only bounds the work one request asks for). */
export const MAX_PASSWORD_LENGTH = 1024;

/**
 * A first password (an account upgraded without one) is set only with an access token issued this
 * recently: the account has no password to re-enter, and the token is the only proof there is.
 * A token taken from a request is refused once it is this old, rather than for its whole lifetime
 * (900 s by default), and its holder cannot turn it into a password, which would end the owner's
 * sessions and let the holder sign in from then on. The owner's client refreshes first.
 */
export const FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS = 300;

export interface PasswordSettings {
  /** PASSWORD_MIN_LENGTH: new passwords (upgrade, change) shorter than this are a 400. */
  minLength: number;
  /** LOGIN_MAX_FAILURES: failed attempts in a row that lock an address, and the most checked at once. */
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
  /** Checks a password against an encoded hash (scrypt; tests count and hold the checks). */
  verify?: (password: string, encoded: string) => Promise<boolean>;
  /** The embedded issuer's check of its own access tokens (when it signs them): a first password needs a recent one. */
  issuer?: { verify(token: string): Promise<{ sub: string; iat?: number }> } | null;
}

/** A sign-in attempt's turn: its number, or why it gets none (locked; or as many attempts as the limit already being checked). */
type Reservation = { kind: 'reserved'; number: number } | { kind: 'locked'; ms: number } | { kind: 'busy' };

export interface SignedIn extends TokenSet {
  user_id: string;
  username: string | null;
}

const GENERIC_FAILURE = 'Invalid e-mail or password';
/**
 * The one spelling of an address that sign-in looks up and counts failures under. Both must come from
 * the same lowering: the database's `lower()` and JavaScript's differ on a few characters (U+0130 "İ"
 * is "i" to PostgreSQL, "i" and a combining dot to JavaScript), and an address that found the account
 * but counted its failures under another key would multiply the guesses a lockout allows.
 */
const normalizedEmail = (email: string) => email.trim().toLowerCase();
/** Lockout counters are per address, known or not; the key never reveals the address. */
const emailKey = (email: string) => sha256Hex(`login:${normalizedEmail(email)}`);

/**
 * Password sign-in of the embedded issuer: passwords set at upgrade or changed by their owner,
 * sign-in by e-mail and password, a lockout after repeated failures, and the administrator's reset.
 *
 * No user enumeration: an unknown address, an account without a password, a disabled account and a
 * wrong password all run one scrypt check and answer the same 401; failures are counted per address
 * whether anyone holds it or not, so the lockout does not tell them apart either. Each attempt
 * takes its turn in the counter before its password is checked, so attempts sent together cannot
 * all pass the lockout check: a burst of guesses gets at most `maxFailures` checks. Passwords are
 * never logged, stored or returned; only the administrator's temporary password is returned, once.
 */
export function createPasswords(deps: PasswordDeps) {
  const { store, users, provider, refreshTokens, clock, settings } = deps;
  const verify = deps.verify ?? verifyPassword;
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

  /**
   * The access token the request came with (the edge verified it and passes it on) was issued to
   * this user within FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS. Checked again here, signature included:
   * the answer hands out a password, not just this request.
   */
  async function requireRecentToken(userId: string, accessToken: string | undefined): Promise<void> {
    const refused = () =>
      new ApiError(401, `Setting a first password needs an access token issued in the last ${FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS / 60} minutes: refresh the session and retry`, {
        param: 'Authorization',
        code: 'reauthentication_required',
      });
    if (!accessToken || !deps.issuer) throw refused();
    const claims = await deps.issuer.verify(accessToken).catch(() => null);
    if (!claims || claims.sub !== userId || typeof claims.iat !== 'number') throw refused();
    const age = clock.now() / 1000 - claims.iat;
    if (age > FIRST_PASSWORD_TOKEN_MAX_AGE_SECONDS) throw refused();
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

  /** As many attempts as the limit are being checked right now: their outcome decides whether the address locks. */
  function busyError(): ApiError {
    return new ApiError(429, 'Too many sign-in attempts for this account at once; retry in 1 second', {
      code: 'login_locked',
      headers: { 'retry-after': '1' },
    });
  }

  /**
   * An attempt's turn, taken under the row lock before its password is checked, so attempts that
   * arrive together are counted one after the other. None while the address is locked, nor while
   * `maxFailures` attempts count already (failed, or still being checked): a burst gets at most
   * that many password checks. A lock that ended, or a last attempt older than the window, starts
   * the count again.
   */
  function reserve(current: LoginAttempts | undefined, now: number): AttemptsChange<Reservation> {
    const state = current ?? { attempts: 0, counted_from: 0, locked_until: null, updated_at: now };
    const ms = lockedMs(state, now);
    if (ms > 0) return { result: { kind: 'locked', ms } };
    const windowOver = state.locked_until !== null || now - state.updated_at > lockoutMs;
    const countedFrom = windowOver ? state.attempts : state.counted_from;
    if (state.attempts - countedFrom >= settings.maxFailures) return { result: { kind: 'busy' } };
    const number = state.attempts + 1;
    return { state: { attempts: number, counted_from: countedFrom, locked_until: null, updated_at: now }, result: { kind: 'reserved', number } };
  }

  /**
   * A wrong password: the attempt stays counted; once `maxFailures` count, the address is locked.
   * An attempt written off meanwhile (by a later success, a reset, a new window) counts no more.
   * Answers how long the address is locked.
   */
  function failed(current: LoginAttempts | undefined, number: number, now: number): AttemptsChange<number> {
    if (!current || number <= current.counted_from || lockedMs(current, now) > 0) return { result: lockedMs(current, now) };
    if (current.attempts - current.counted_from < settings.maxFailures) return { result: 0 };
    const locked = { attempts: current.attempts, counted_from: current.counted_from, locked_until: now + lockoutMs, updated_at: current.updated_at };
    return { state: locked, result: lockoutMs };
  }

  /**
   * The right password: the attempts numbered up to this one are written off (as if they had come
   * one after the other, this success came after them), those taken after it still count. The lock
   * is lifted when they are fewer than the limit.
   */
  function succeeded(current: LoginAttempts | undefined, number: number): AttemptsChange<void> {
    if (!current) return { result: undefined };
    const countedFrom = Math.min(current.attempts, Math.max(current.counted_from, number));
    const counting = current.attempts - countedFrom;
    const lockedUntil = counting >= settings.maxFailures ? current.locked_until : null;
    return { state: { attempts: current.attempts, counted_from: countedFrom, locked_until: lockedUntil, updated_at: current.updated_at }, result: undefined };
  }

  /**
   * Takes a turn (429 while locked or busy), then checks `password` against `hash` (or the decoy)
   * and records the outcome. Every attempt that got a turn records one; a check that throws counts
   * as a failure.
   */
  async function check(key: string, password: string, hash: string | null | undefined): Promise<{ ok: boolean; lockedFor: number; now: number }> {
    const before = clock.now();
    const turn = await store.updateAttempts(key, (current) => reserve(current, before), {
      create: { attempts: 0, counted_from: 0, locked_until: null, updated_at: before },
    });
    if (turn.kind === 'locked') throw lockedError(turn.ms, before);
    if (turn.kind === 'busy') throw busyError();
    let matches: boolean;
    try {
      // Both operands evaluated: the decoy check costs what a real one costs.
      matches = await verify(password, hash ?? (await decoyHash()));
    } catch (error) {
      await store.updateAttempts(key, (current) => failed(current, turn.number, clock.now()));
      throw error;
    }
    const ok = matches && hash != null;
    const now = clock.now();
    if (ok) {
      await store.updateAttempts(key, (current) => succeeded(current, turn.number));
      return { ok, lockedFor: 0, now };
    }
    const lockedFor = await store.updateAttempts(key, (current) => failed(current, turn.number, now));
    return { ok, lockedFor, now };
  }

  /**
   * A new session for a user whose password `checkedHash` was just checked. It is stored only if,
   * under the user row's lock, the account is still enabled and that is still its password: a
   * password change, a reset or a disabling that landed between the check and now wins (401).
   */
  async function session(userId: string, checkedHash: string): Promise<SignedIn> {
    const user = await users.byId(userId);
    if (!user || user.disabled) throw new ApiError(401, GENERIC_FAILURE, { code: 'invalid_credentials' });
    const tokens = await provider.startSession(user, async (trx) => {
      const current = await users.byId(userId, trx);
      return current !== undefined && !current.disabled && !current.is_guest && (await store.hashOf(userId, trx)) === checkedHash;
    });
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
      const account = await store.accountByEmail(normalizedEmail(email));
      const usable = account && !account.disabled && !account.is_guest ? account.hash : null;
      const result = await check(emailKey(email), password, usable);
      if (result.lockedFor > 0) throw lockedError(result.lockedFor, result.now);
      if (!result.ok || !account || !usable) throw new ApiError(401, GENERIC_FAILURE, { code: 'invalid_credentials' });
      return session(account.user_id, usable);
    },

    /**
     * `POST /auth/password`: the caller changes its password. The current one is required when one
     * is set (wrong → 400, counted toward the lockout like a failed sign-in); a first one needs a
     * recently issued access token (`accessToken`, 401 `reauthentication_required`). Every refresh token of
     * the user is revoked (other sessions end when their access token expires); the answer is a new
     * token pair for the caller.
     */
    async change(userId: string, current: string | undefined, next: string, accessToken?: string): Promise<SignedIn> {
      requirePasswordSignIn();
      checkNew(next, 'new_password');
      const user = await users.byId(userId);
      if (!user || user.disabled) throw new ApiError(401, 'Unknown or disabled user');
      if (user.is_guest || !user.email) throw new ApiError(400, 'A guest account has no password; upgrade it first (POST /auth/upgrade with a password)', { param: 'new_password' });
      const hash = await store.hashOf(userId);
      if (hash === undefined) await requireRecentToken(userId, accessToken);
      if (hash !== undefined) {
        if (current === undefined) throw new ApiError(400, "Missing required parameter: 'current_password'.", { param: 'current_password' });
        const result = await check(emailKey(user.email), current, hash);
        if (result.lockedFor > 0) throw lockedError(result.lockedFor, result.now);
        if (!result.ok) throw new ApiError(400, 'The current password is wrong', { param: 'current_password', code: 'invalid_password' });
      }
      const newHash = await hashPassword(next);
      await store.knex.transaction(async (trx) => {
        // The current password was checked against `hash` (none: a first password): another change
        // that landed meanwhile is not overwritten (its owner would lose the password just set, and
        // its session), 409.
        let landed: boolean;
        if (hash === undefined) landed = await store.insertHashIfNone(trx, userId, newHash, clock.now());
        else {
          landed = (await store.lockedHashOf(trx, userId)) === hash;
          if (landed) await store.setHash(trx, userId, newHash, clock.now());
        }
        if (!landed) throw new ApiError(409, 'The password was changed by another request while this one ran; sign in with the new password', { param: 'current_password' });
        await refreshTokens.revokeUser(trx, userId);
      });
      deps.logger.info({ userId }, 'password changed');
      return session(userId, newHash);
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
        await store.writeOffAttempts(emailKey(user.email!), trx);
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
