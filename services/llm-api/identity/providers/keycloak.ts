import type { Knex } from 'knex';
import { decodeJwt } from 'jose';
import {
  ApiError,
  ConfigError,
  createTrustedEndpoint,
  EXTERNAL_ISSUER,
  randomBase62,
  type Clock,
  type Logger,
  type TrustedRequest,
  type TrustedResponse,
  USER_SUBJECT_MAX,
} from '../../../kit/index.js';
import type { IdentityUsersStore, UserRecord } from '../store.js';
import type { GuestProfile, IdentityProvider, TokenSet, UpgradeChange, UserStanding } from './types.js';

/**
 * Keycloak driver, over Keycloak's admin REST API and the realm's OpenID Connect token endpoint:
 * - admin calls use a service-account token (client_credentials grant of KEYCLOAK_CLIENT_ID);
 * - a guest is `POST /admin/realms/{realm}/users` with attribute guest=["true"] and a random
 *   password, then the password grant gives the guest its tokens;
 * - refresh is the refresh_token grant; upgrade is GET + PUT of the user representation
 *   (attributes are replaced as a whole by PUT, so they are merged first);
 * - API-key hashes are mirrored in the attribute `api_key_hashes`.
 * The platform user row has issuer `external` and subject = the Keycloak user id, which is what
 * the kit's user directory maps a Keycloak token's `sub` to.
 */
export interface KeycloakSettings {
  url: string;
  realm: string;
  clientId: string;
  clientSecret: string;
  timeoutMs: number;
}

export const API_KEY_ATTRIBUTE = 'api_key_hashes';

/**
 * How long the realm's answer on a user (enabled, disabled, deleted) is trusted before a key
 * validation of that user asks again: one admin-API read per user and process per interval, at most.
 */
export const USER_RECHECK_MS = 60_000;
/** The longest a validation waits for the realm's answer about a user it has no recent answer for. */
export const STANDING_WAIT_MS = 1_000;
/**
 * How long a service-account token whose answer gives no `expires_in` is used: OAuth 2.0 makes the
 * field optional, and without a bound every admin call would fetch a token of its own.
 */
export const ADMIN_TOKEN_DEFAULT_TTL_MS = 60_000;
/** Users whose standing is remembered; past this the oldest answer is forgotten (asked again when needed). */
const STANDING_MAX_ENTRIES = 10_000;

interface TokenResponse {
  access_token: string;
  refresh_token?: string;
  expires_in: number;
  refresh_expires_in?: number;
  token_type?: string;
}

interface UserRepresentation {
  id?: string;
  username?: string;
  email?: string;
  emailVerified?: boolean;
  enabled?: boolean;
  firstName?: string;
  lastName?: string;
  attributes?: Record<string, string[]>;
  [key: string]: unknown;
}

const unavailable = (what: string, cause?: unknown) =>
  new ApiError(502, `The identity provider is unavailable (${what})`, { cause });

/** Token answers and user representations are small; an answer past this is refused, not held. */
const KEYCLOAK_ANSWER_MAX_BYTES = 1024 * 1024;

/** An answer's JSON body; one that is not JSON means the identity provider is not working. */
function answerOf<T>(res: TrustedResponse, what: string): T {
  try {
    return res.json<T>();
  } catch (error) {
    throw unavailable(`${what}: the answer is not JSON`, error);
  }
}

/** The OAuth 2.0 `error` code of a token endpoint's error answer (RFC 6749 5.2), if it has one. */
function oauthError(res: TrustedResponse): string | undefined {
  try {
    const error = res.json<{ error?: unknown }>()?.error;
    return typeof error === 'string' ? error.slice(0, 64) : undefined;
  } catch {
    return undefined;
  }
}

/** A token endpoint's refusal of the grant itself (the token expired, revoked, its session ended, malformed). */
const refusesToken = (res: TrustedResponse) => {
  const error = oauthError(res);
  return error === 'invalid_grant' || error === 'invalid_request';
};

export function createKeycloakClient(settings: KeycloakSettings, clock: Clock) {
  // The operator's Keycloak, through the kit's trusted-endpoint client (timeout, answer size).
  const keycloak = createTrustedEndpoint({ name: 'Keycloak', baseUrl: settings.url, timeoutMs: settings.timeoutMs, maxBytes: KEYCLOAK_ANSWER_MAX_BYTES });
  const realm = encodeURIComponent(settings.realm);
  const tokenPath = `realms/${realm}/protocol/openid-connect/token`;
  const adminPath = `admin/realms/${realm}`;
  let adminToken: { value: string; expiresAt: number } | null = null;

  async function send(path: string, init: TrustedRequest, what: string): Promise<TrustedResponse> {
    try {
      return await keycloak.request(path, init);
    } catch (error) {
      throw unavailable(what, error);
    }
  }

  async function tokenRequest(form: Record<string, string>, what: string): Promise<TrustedResponse> {
    return send(tokenPath, { method: 'POST', form: { client_id: settings.clientId, client_secret: settings.clientSecret, ...form } }, what);
  }

  async function admin(): Promise<string> {
    const now = clock.now();
    if (adminToken && adminToken.expiresAt > now) return adminToken.value;
    const res = await tokenRequest({ grant_type: 'client_credentials' }, 'service-account token');
    if (!res.ok) throw unavailable(`service-account token: HTTP ${res.status}`);
    const body = answerOf<TokenResponse>(res, 'service-account token');
    // Renew a little before Keycloak's expiry so a call never races it.
    const lifetime: unknown = body?.expires_in;
    const ttlMs =
      typeof lifetime === 'number' && Number.isFinite(lifetime) && lifetime > 0 ? Math.max(0, lifetime - 30) * 1000 : ADMIN_TOKEN_DEFAULT_TTL_MS;
    adminToken = { value: body.access_token, expiresAt: now + ttlMs };
    return adminToken.value;
  }

  async function adminCall(method: string, path: string, what: string, body?: unknown): Promise<TrustedResponse> {
    const cached = adminToken !== null && adminToken.expiresAt > clock.now();
    const token = await admin();
    const res = await send(`${adminPath}${path}`, { method, headers: { authorization: `Bearer ${token}` }, json: body }, what);
    if (res.status !== 401) return res;
    // Refused before its expiry (its session ended: Keycloak restarted, an administrator logged the
    // service account out): a cached token is renewed and the call made once more; a new one is not.
    if (adminToken?.value === token) adminToken = null;
    if (!cached) return res;
    const renewed = await admin();
    const again = await send(`${adminPath}${path}`, { method, headers: { authorization: `Bearer ${renewed}` }, json: body }, what);
    // A renewed token refused too is not kept: the next call asks for a new one at once.
    if (again.status === 401 && adminToken?.value === renewed) adminToken = null;
    return again;
  }

  /** The user, or undefined when the realm has no such user (deleted in Keycloak). */
  async function findUser(id: string): Promise<UserRepresentation | undefined> {
    const res = await adminCall('GET', `/users/${encodeURIComponent(id)}`, 'read user');
    if (res.status === 404) return undefined;
    if (!res.ok) throw unavailable(`read user: HTTP ${res.status}`);
    return answerOf<UserRepresentation>(res, 'read user');
  }

  return {
    tokenRequest,
    /**
     * RFC 7009 token revocation at the realm (`…/openid-connect/revoke`), which for a refresh token
     * ends its session; Keycloak answers 200 for an unknown token as well.
     */
    async revoke(refreshToken: string): Promise<TrustedResponse> {
      return send(
        `realms/${realm}/protocol/openid-connect/revoke`,
        { method: 'POST', form: { client_id: settings.clientId, client_secret: settings.clientSecret, token: refreshToken, token_type_hint: 'refresh_token' } },
        'revoke',
      );
    },
    /**
     * The new user's id, or null when the realm created the user but its `Location` header does not
     * name it readably (missing, empty, a malformed percent-encoding): the caller must find it by
     * username to remove it, since the realm has the account either way.
     */
    async createUser(rep: UserRepresentation): Promise<string | null> {
      const res = await adminCall('POST', '/users', 'create user', rep);
      if (res.status === 409) throw new ApiError(409, 'The identity provider already has this user');
      if (res.status !== 201) throw unavailable(`create user: HTTP ${res.status}`);
      const location = res.headers.get('location') ?? '';
      try {
        return decodeURIComponent(location.split('/').pop() ?? '') || null;
      } catch {
        return null;
      }
    },
    async findByUsername(username: string): Promise<UserRepresentation[]> {
      const query = new URLSearchParams({ username, exact: 'true' });
      const res = await adminCall('GET', `/users?${query}`, 'search users');
      if (!res.ok) throw unavailable(`search users: HTTP ${res.status}`);
      const found = answerOf<unknown>(res, 'search users');
      return Array.isArray(found) ? (found as UserRepresentation[]) : [];
    },
    async getUser(id: string): Promise<UserRepresentation> {
      const rep = await findUser(id);
      if (!rep) throw unavailable('read user: HTTP 404');
      return rep;
    },
    findUser,
    async findByEmail(email: string): Promise<UserRepresentation[]> {
      const query = new URLSearchParams({ email, exact: 'true' });
      const res = await adminCall('GET', `/users?${query}`, 'search users');
      if (!res.ok) throw unavailable(`search users: HTTP ${res.status}`);
      return answerOf<UserRepresentation[]>(res, 'search users');
    },
    /** Answers false when the realm has no such user (deleted in Keycloak meanwhile). */
    async updateUser(id: string, rep: UserRepresentation): Promise<boolean> {
      const res = await adminCall('PUT', `/users/${encodeURIComponent(id)}`, 'update user', rep);
      if (res.status === 409) {
        // Keycloak names the field it found taken: {"errorMessage":"User exists with same username"} (or "… email").
        let message = '';
        try {
          const body = res.json<{ errorMessage?: unknown }>();
          if (typeof body?.errorMessage === 'string') message = body.errorMessage;
        } catch {
          // no JSON: the e-mail, the field every upgrade changes
        }
        if (/username/i.test(message) && !/email/i.test(message)) throw new ApiError(409, 'This username is already taken', { param: 'username' });
        throw new ApiError(409, 'This e-mail is already registered', { param: 'email' });
      }
      if (res.status === 404) return false;
      if (res.status !== 204 && !res.ok) throw unavailable(`update user: HTTP ${res.status}`);
      return true;
    },
    /** Deletes the user; one the realm no longer has is already gone. */
    async deleteUser(id: string): Promise<void> {
      const res = await adminCall('DELETE', `/users/${encodeURIComponent(id)}`, 'delete user');
      if (res.status !== 204 && res.status !== 404 && !res.ok) throw unavailable(`delete user: HTTP ${res.status}`);
    },
    async logout(id: string): Promise<void> {
      const res = await adminCall('POST', `/users/${encodeURIComponent(id)}/logout`, 'logout user');
      // 404: the user was deleted in Keycloak, which ended its sessions there.
      if (res.status !== 204 && res.status !== 404 && !res.ok) throw unavailable(`logout user: HTTP ${res.status}`);
    },
  };
}

export function createKeycloakProvider(deps: { settings: KeycloakSettings; clock: Clock; users: IdentityUsersStore; logger: Logger }): IdentityProvider {
  const { users } = deps;
  const kc = createKeycloakClient(deps.settings, deps.clock);

  function toTokenSet(body: TokenResponse): TokenSet {
    if (typeof body?.access_token !== 'string' || !body.access_token) throw unavailable('token response without access_token');
    if (!body.refresh_token) throw unavailable('token response without refresh_token');
    return {
      access_token: body.access_token,
      refresh_token: body.refresh_token,
      token_type: 'Bearer',
      expires_in: body.expires_in,
      refresh_expires_in: body.refresh_expires_in ?? null,
    };
  }

  /**
   * A representation read for a GET + PUT without its `enabled` (Keycloak leaves a field the PUT
   * omits as it is): only `setEnabled` writes it, so a disable done between another change's GET and
   * PUT (an administrator's, here or in the realm) is not undone by that PUT.
   */
  const withoutEnabled = (rep: UserRepresentation): UserRepresentation => {
    const { enabled: _enabled, ...rest } = rep;
    return rest;
  };

  // Platform-issued users (the bootstrap admin) have no Keycloak account to mirror.
  const atKeycloak = (user: Pick<UserRecord, 'issuer'>) => user.issuer === EXTERNAL_ISSUER;

  /**
   * GET + PUT of the user's attributes. `gone` says what a user the realm no longer has (deleted in
   * Keycloak) means: nothing to change there ('ignore'), or a refusal ('fail', 502).
   */
  async function mergeAttributes(user: UserRecord, gone: 'ignore' | 'fail', change: (attributes: Record<string, string[]>) => void): Promise<void> {
    if (!atKeycloak(user)) return;
    const rep = gone === 'fail' ? await kc.getUser(user.subject) : await kc.findUser(user.subject);
    if (!rep) return;
    const attributes = { ...(rep.attributes ?? {}) };
    change(attributes);
    if (!(await kc.updateUser(user.subject, { ...withoutEnabled(rep), attributes })) && gone === 'fail') throw unavailable('update user: HTTP 404');
  }

  // The realm's last answer per Keycloak user id, and the reads running (one per user at a time).
  // `order` is when the answer was decided (a read's: when it started): a read that began before a
  // newer answer was stored (a disable or re-enable through this API) does not put its older one back.
  const standings = new Map<string, { standing: UserStanding; checkedAt: number; order: number }>();
  const checking = new Map<string, Promise<UserStanding>>();
  // One counter for every user: its order is all that matters, and it needs no entry per user.
  let lastOrder = 0;
  // The newest answer forgotten to keep the map bounded: a read that began before it may have been
  // overtaken by it (whose user is no longer known), so such a read's answer is used but not kept.
  let forgottenUpTo = 0;

  async function check(subject: string, previous: UserStanding | undefined): Promise<UserStanding> {
    const order = ++lastOrder;
    let standing: UserStanding;
    try {
      const rep = await kc.findUser(subject);
      standing = !rep || rep.enabled === false ? 'disabled' : 'active';
    } catch (error) {
      // Unreachable: a user the realm said was disabled stays refused; otherwise nothing is known,
      // and the key keeps working as the platform's own row allows.
      standing = previous === 'disabled' ? 'disabled' : 'unknown';
      deps.logger.warn({ err: (error as Error).message, subject }, 'Keycloak could not be asked whether a user is still enabled');
    }
    // Written after a failure too: a realm that is down is asked again an interval later, not per validation.
    // A newer answer stored meanwhile stands, and is what the validations waiting on this read get.
    return remember(subject, standing, order);
  }

  /** Stores the answer unless a newer one is stored already; answers the one that stands. */
  function remember(subject: string, standing: UserStanding, order: number): UserStanding {
    const stored = standings.get(subject);
    if (stored && stored.order > order) return stored.standing;
    if (!stored && forgottenUpTo > order) return standing;
    standings.delete(subject);
    if (standings.size >= STANDING_MAX_ENTRIES) {
      const [oldest, entry] = standings.entries().next().value as [string, { order: number }];
      standings.delete(oldest);
      forgottenUpTo = Math.max(forgottenUpTo, entry.order);
    }
    standings.set(subject, { standing, checkedAt: deps.clock.now(), order });
    return standing;
  }

  /** Deletes a guest just created in the realm; a failure is logged (the subject only: no password, no token). */
  async function discardGuest(subject: string, why: string): Promise<void> {
    await kc.deleteUser(subject).catch((cleanup: unknown) =>
      deps.logger.warn({ err: (cleanup as Error).message, subject }, `Keycloak guest left behind after ${why}`),
    );
  }

  /**
   * Deletes a guest the realm created but whose id its answer did not give readably, found by its
   * username. Only an account that is this guest's (same username, and no other platform user's id
   * in its attributes) is deleted; a failure is logged, the caller's 502 stands either way.
   */
  async function discardUnnamedGuest(profile: GuestProfile): Promise<void> {
    let found: UserRepresentation[];
    try {
      found = await kc.findByUsername(profile.username);
    } catch (error) {
      deps.logger.warn({ err: (error as Error).message, username: profile.username }, 'Keycloak guest left behind after an unreadable Location header');
      return;
    }
    const wanted = profile.username.toLowerCase();
    for (const rep of found) {
      const owner = rep.attributes?.platform_user_id;
      if (typeof rep.id !== 'string' || !rep.id || rep.username?.toLowerCase() !== wanted) continue;
      if (owner && !owner.includes(profile.userId)) continue;
      await discardGuest(rep.id, 'an unreadable Location header');
    }
  }

  return {
    kind: 'keycloak',
    async createGuest(profile: GuestProfile) {
      const password = randomBase62(40);
      const created = await kc.createUser({
        username: profile.username,
        email: profile.email,
        enabled: true,
        emailVerified: false,
        attributes: { guest: ['true'], platform_user_id: [profile.userId] },
        credentials: [{ type: 'password', value: password, temporary: false }],
      });
      if (created === null) {
        await discardUnnamedGuest(profile);
        throw unavailable('create user: the Location header does not name the user');
      }
      const subject = created;
      // The guest's tokens before the platform's row is written: a realm that will not sign the new
      // account in (a required action, direct grants off, down) leaves nothing behind, here or there.
      let tokens: TokenSet;
      try {
        const res = await kc.tokenRequest({ grant_type: 'password', username: profile.username, password, scope: 'openid' }, 'guest token');
        if (!res.ok) throw unavailable(`guest token: HTTP ${res.status}`);
        tokens = toTokenSet(answerOf<TokenResponse>(res, 'guest token'));
      } catch (error) {
        await discardGuest(subject, 'its sign-in failed');
        throw error;
      }
      return {
        issuer: EXTERNAL_ISSUER,
        subject,
        async tokens(_trx: Knex) {
          return tokens;
        },
        discard: () => discardGuest(subject, 'the platform could not record it'),
      };
    },

    async refresh(refreshToken) {
      const res = await kc.tokenRequest({ grant_type: 'refresh_token', refresh_token: refreshToken }, 'refresh');
      // Only a refusal of the token itself is the caller's: the realm's `invalid_client` or
      // `unauthorized_client` (a wrong KEYCLOAK_CLIENT_SECRET, a client disabled) would otherwise tell
      // every user their session ended, when it is the platform's client that Keycloak refuses.
      if (res.status === 400 && refusesToken(res)) throw new ApiError(401, 'Invalid or expired refresh token', { param: 'refresh_token' });
      if (!res.ok) throw unavailable(`refresh: HTTP ${res.status}`);
      const tokens = toTokenSet(answerOf<TokenResponse>(res, 'refresh'));
      // The token came straight from the realm's token endpoint: its claims are read, not verified.
      let claims: ReturnType<typeof decodeJwt>;
      try {
        claims = decodeJwt(tokens.access_token);
      } catch (error) {
        throw unavailable('refresh: the access token is not a JWT', error);
      }
      const sub = typeof claims.sub === 'string' && claims.sub.length <= USER_SUBJECT_MAX ? claims.sub : undefined;
      // A realm user the platform has not seen yet (signed in on the realm's pages, refreshing before
      // any other call) gets its row here as its first API call would give it: refusing it would
      // end a session the realm has just renewed.
      const text = (value: unknown) => (typeof value === 'string' ? value : null);
      const user = sub
        ? ((await users.byIssuerSubject(EXTERNAL_ISSUER, sub)) ??
          (await users.ensureExternal({ issuer: EXTERNAL_ISSUER, subject: sub, email: text(claims.email), username: text(claims.preferred_username) })))
        : undefined;
      if (!user || user.disabled) throw new ApiError(401, 'Invalid or expired refresh token', { param: 'refresh_token' });
      return { userId: user.id, tokens };
    },

    async revokeRefresh(refreshToken) {
      const res = await kc.revoke(refreshToken);
      // 400 is Keycloak's answer to a token it cannot read (another client's, malformed): nothing to end.
      if (!res.ok && res.status !== 400) throw unavailable(`revoke: HTTP ${res.status}`);
    },

    async startSession() {
      throw new ApiError(400, 'Sign-in is handled by the identity provider (Keycloak): sign in there and call the API with its access token', {
        code: 'external_identity_provider',
      });
    },

    async upgrade(user, change: UpgradeChange) {
      if (!atKeycloak(user)) return;
      const holders = await kc.findByEmail(change.email);
      if (holders.some((h) => h.id !== user.subject)) throw new ApiError(409, 'This e-mail is already registered', { param: 'email' });
      const rep = await kc.getUser(user.subject);
      const [firstName, ...rest] = (change.fullName ?? '').trim().split(/\s+/).filter(Boolean);
      const updated = await kc.updateUser(user.subject, {
        ...withoutEnabled(rep),
        email: change.email,
        // What the platform decided (UPGRADE_VERIFIES_EMAIL): the realm's tokens carry it as
        // email_verified, which the edge reads for the tier, and nobody proved this address.
        emailVerified: change.emailVerified,
        ...(change.username ? { username: change.username } : {}),
        ...(firstName ? { firstName, lastName: rest.join(' ') } : {}),
        attributes: { ...(rep.attributes ?? {}), guest: ['false'] },
      });
      if (!updated) throw unavailable('update user: HTTP 404');
    },

    mirrorsApiKeys: true,
    async apiKeyAdded(user, keyHash) {
      await mergeAttributes(user, 'fail', (attributes) => {
        const hashes = new Set(attributes[API_KEY_ATTRIBUTE] ?? []);
        hashes.add(keyHash);
        attributes[API_KEY_ATTRIBUTE] = [...hashes];
      });
    },

    async apiKeyRemoved(user, keyHash) {
      // A user deleted in Keycloak has no attributes left to drop the hash from.
      await mergeAttributes(user, 'ignore', (attributes) => {
        attributes[API_KEY_ATTRIBUTE] = (attributes[API_KEY_ATTRIBUTE] ?? []).filter((h) => h !== keyHash);
      });
    },

    async setEnabled(user, enabled) {
      if (!atKeycloak(user)) return;
      // A user deleted in Keycloak has nothing to disable (or enable) there: the platform's side still
      // changes, which is what cuts off its API keys and the rest of its access here.
      const rep = await kc.findUser(user.subject);
      if (!rep) return;
      if (!(await kc.updateUser(user.subject, { ...rep, enabled }))) return;
      // This process knows the realm's new answer already: a user re-enabled here is not refused
      // for the rest of an interval on an answer from before.
      remember(user.subject, enabled ? 'active' : 'disabled', ++lastOrder);
      if (!enabled) await kc.logout(user.subject);
    },

    standing(user) {
      if (!atKeycloak(user)) return 'active';
      const known = standings.get(user.subject);
      const age = known ? deps.clock.now() - known.checkedAt : Infinity;
      if (age < USER_RECHECK_MS) return known!.standing;
      let running = checking.get(user.subject);
      if (!running) {
        running = check(user.subject, known?.standing).finally(() => checking.delete(user.subject));
        checking.set(user.subject, running);
      }
      // A key in use is re-read ahead of time: within a second interval the last answer stands while
      // the read runs. Older or none (an idle key, a restart, an answer forgotten): the read is
      // waited for, up to STANDING_WAIT_MS, so a realm that hangs cannot hold a good key past the
      // edge's own timeout; then the last answer (none: unknown) stands.
      if (age < 2 * USER_RECHECK_MS) return known!.standing;
      return Promise.race([running, new Promise<UserStanding>((resolve) => setTimeout(resolve, STANDING_WAIT_MS, known?.standing ?? 'unknown').unref())]);
    },
  };
}

export function keycloakSettingsFrom(config: {
  KEYCLOAK_URL?: string;
  KEYCLOAK_REALM?: string;
  KEYCLOAK_CLIENT_ID?: string;
  KEYCLOAK_CLIENT_SECRET?: string;
  KEYCLOAK_TIMEOUT_MS: number;
}): KeycloakSettings | null {
  const { KEYCLOAK_URL, KEYCLOAK_REALM, KEYCLOAK_CLIENT_ID, KEYCLOAK_CLIENT_SECRET } = config;
  if (!KEYCLOAK_URL) return null;
  if (!KEYCLOAK_REALM || !KEYCLOAK_CLIENT_ID || !KEYCLOAK_CLIENT_SECRET) {
    const missing = !KEYCLOAK_REALM ? 'KEYCLOAK_REALM' : !KEYCLOAK_CLIENT_ID ? 'KEYCLOAK_CLIENT_ID' : 'KEYCLOAK_CLIENT_SECRET';
    throw new ConfigError(missing, 'required when KEYCLOAK_URL is set (variable is not set)');
  }
  return { url: KEYCLOAK_URL, realm: KEYCLOAK_REALM, clientId: KEYCLOAK_CLIENT_ID, clientSecret: KEYCLOAK_CLIENT_SECRET, timeoutMs: config.KEYCLOAK_TIMEOUT_MS };
}
