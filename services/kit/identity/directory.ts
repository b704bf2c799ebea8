import { isId } from '../ids.js';
import type { Clock } from '../clock.js';
import type { MaybePromise } from '../maybe-async.js';
import type { Principal } from './principal.js';
import { USER_SUBJECT_MAX, type UserRow, type UsersStore } from './users-store.js';

/** Issuer recorded for identities whose X-User-ID is not a platform id (an external IdP such as Keycloak). */
export const EXTERNAL_ISSUER = 'external';

export interface IdentityClaims {
  authMethod: 'jwt' | 'apikey';
  userId: string;
  subject: string;
  email: string | null;
  username: string | null;
  /** The API key the edge validated (`x-user-key-id`), for `authMethod` `apikey`. */
  apiKeyId?: string | null;
}

/**
 * Resolves the edge's identity claims to one platform user, with `is_admin` from the users table.
 * Lookups are cached for a short TTL so the hot path does not query per request; `invalidate`
 * drops an entry at once (admin flag or disabled changed in this process).
 */
export function createUserDirectory(store: UsersStore, options: { ttlMs: number; clock: Clock }) {
  const cache = new Map<string, { user: UserRow; expires: number }>();
  const MAX_ENTRIES = 10_000;
  // Counts invalidations. A lookup that began before one may read the row as it was before the
  // change (a demotion, a disabling): its answer serves the requests already waiting for it, but
  // no later request joins it and it is not cached, or the old row would be served for a whole TTL
  // after `invalidate`. (An external identity's lookup is keyed by its subject, which `invalidate`
  // does not know: the generation covers it too.)
  let generation = 0;
  // When an entry expires under load, every request in flight for that user missed at once and each
  // queried the database (64 connections: 64 identical lookups); they now share the first one's.
  type SharedLookup = { row: Promise<UserRow | undefined>; generation: number };
  const inFlight = new Map<string, SharedLookup>();
  const sharedLookup = (claims: IdentityClaims): SharedLookup => {
    let pending = inFlight.get(claims.userId);
    if (!pending || pending.generation !== generation) {
      const shared: SharedLookup = {
        generation,
        row: lookup(claims).finally(() => {
          if (inFlight.get(claims.userId) === shared) inFlight.delete(claims.userId);
        }),
      };
      inFlight.set(claims.userId, shared);
      pending = shared;
    }
    return pending;
  };

  async function lookup(claims: IdentityClaims): Promise<UserRow | undefined> {
    if (isId('user', claims.userId)) return store.byId(claims.userId);
    // An external issuer's subject: map (issuer, subject) to a platform user, creating it on first sight.
    // One longer than the column can name no user (the edge passes at most 256 characters on).
    const subject: string = claims.userId;
    if (subject.length > USER_SUBJECT_MAX) return undefined;
    return store.ensureExternal({ issuer: EXTERNAL_ISSUER, subject, email: claims.email, username: claims.username });
  }

  return {
    /** Synchronous on a cache hit (nearly every request); a promise when the user is looked up. */
    resolve(claims: IdentityClaims): MaybePromise<Principal | null> {
      const key = claims.userId;
      const now = options.clock.now();
      const cached = cache.get(key);
      if (cached && cached.expires > now) return principalOf(cached.user, claims);
      const shared = sharedLookup(claims);
      return shared.row.then((row) => {
        if (!row) return null;
        if (options.ttlMs > 0 && shared.generation === generation) {
          if (cache.size >= MAX_ENTRIES) cache.delete(cache.keys().next().value as string);
          cache.set(key, { user: row, expires: now + options.ttlMs });
        }
        return principalOf(row, claims);
      });
    },
    invalidate(userId?: string): void {
      // A lookup already running may return the row as it was before the change: not shared from
      // now on, and not cached when it ends (the generation moved on).
      generation++;
      if (userId === undefined) {
        inFlight.clear();
        return cache.clear();
      }
      inFlight.delete(userId);
      cache.delete(userId);
      // External identities are cached under their subject (X-User-ID); drop those of this user too.
      for (const [key, entry] of cache) if (entry.user.id === userId) cache.delete(key);
    },
  };
}

export type UserDirectory = ReturnType<typeof createUserDirectory>;

function principalOf(row: UserRow, claims: IdentityClaims): Principal | null {
  if (row.disabled) return null;
  // Every field in one literal: V8 (Node 20) gives `{ ...principal, apiKeyId }` a map of its
  // own per object, so each read of a principal's field downstream missed every inline cache
  // and went to V8's runtime (four to five misses per chat request, found with `--log-ic`).
  return {
    userId: row.id,
    subject: row.subject,
    email: row.email ?? claims.email,
    username: row.username ?? claims.username,
    authMethod: claims.authMethod,
    isAdmin: row.is_admin,
    isGuest: row.is_guest,
    apiKeyId: claims.apiKeyId ?? null,
  };
}
