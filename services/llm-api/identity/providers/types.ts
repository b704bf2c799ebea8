import type { Knex } from 'knex';
import type { UserRecord } from '../store.js';

/** What a client gets from guest login and refresh (SPEC.md 4.1). */
export interface TokenSet {
  access_token: string;
  refresh_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_expires_in: number | null;
}

export interface GuestProfile {
  userId: string;
  email: string;
  username: string;
}

/** A guest account just created at the provider; `tokens` runs once the users row exists (never inside a transaction). */
export interface GuestAccount {
  issuer: string;
  subject: string;
  tokens(trx: Knex, user: UserRecord): Promise<TokenSet>;
  /**
   * The platform's row could not be written: the account is removed at the provider, so no user
   * is left there that no platform user stands for. Best effort: never throws (a failure is logged).
   */
  discard(): Promise<void>;
}

export interface UpgradeChange {
  email: string;
  username?: string;
  fullName?: string;
  /**
   * Whether the platform marks the new e-mail verified (UPGRADE_VERIFIES_EMAIL; nobody proved the
   * address). The provider records the same, so its tokens' `email_verified` says what the platform says.
   */
  emailVerified: boolean;
}

/**
 * The identity provider behind the auth endpoints. Two drivers: `embedded` (llm-api is the token
 * issuer; default) and `keycloak` (users and tokens live in a Keycloak realm). The users table
 * is always the platform's record ("one user, one id"); the driver mirrors changes to its side.
 */
export interface IdentityProvider {
  readonly kind: 'embedded' | 'keycloak';
  /**
   * Capability: the platform itself keeps passwords and signs users in with them (`/auth/login`,
   * `/auth/password`, reset-login, a password at upgrade). Absent or false: sign-in and passwords
   * belong to the provider, and those endpoints answer 400 pointing to it.
   */
  readonly passwordSignIn?: boolean;
  createGuest(profile: GuestProfile): Promise<GuestAccount>;
  /** Exchanges a refresh token; 401 ApiError when it is invalid, expired, reused or its user is disabled. */
  refresh(refreshToken: string): Promise<{ userId: string; tokens: TokenSet }>;
  /** Sign-out: ends the session the refresh token belongs to; an unknown or invalid token is ignored. */
  revokeRefresh(refreshToken: string): Promise<void>;
  /**
   * A new session (a refresh-token family) for a user who proved who they are (password sign-in).
   * Only the embedded issuer can; Keycloak signs its users in itself (400 pointing to it).
   * `stillValid` is asked, under the same lock of the user row a user-wide revocation takes,
   * whether that proof still holds (the account enabled, its password unchanged); false → 401.
   */
  startSession(user: UserRecord, stillValid: (trx: Knex) => Promise<boolean>): Promise<TokenSet>;
  /** Applies an upgrade at the provider (409 ApiError when the provider already has that e-mail). */
  upgrade(user: UserRecord, change: UpgradeChange): Promise<void>;
  /** Whether the provider keeps a copy of the key hashes (false: apiKeyAdded/Removed do nothing). */
  readonly mirrorsApiKeys: boolean;
  /** Mirrors the set of a user's API-key hashes at the provider (Keycloak user attributes). */
  apiKeyAdded(user: UserRecord, keyHash: string): Promise<void>;
  apiKeyRemoved(user: UserRecord, keyHash: string): Promise<void>;
  /** Disables or re-enables the account at the provider and ends its sessions there. */
  setEnabled(user: UserRecord, enabled: boolean): Promise<void>;
  /**
   * Whether the provider still lets this user in, asked when one of its API keys is validated: a
   * user deleted or disabled at the provider alone (Keycloak's console) must not keep using its
   * keys. `disabled`: deleted or disabled there; `unknown`: the provider could not be asked and
   * never said otherwise. The driver caches the answer (a value, not a promise, while it is fresh).
   */
  standing(user: Pick<UserRecord, 'issuer' | 'subject'>): UserStanding | Promise<UserStanding>;
}

export type UserStanding = 'active' | 'disabled' | 'unknown';
